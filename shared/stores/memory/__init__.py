"""The memory store: tasks, events and push records in this process's memory."""
