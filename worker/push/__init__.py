"""Push delivery: the Celery task that sends a task's events to its webhooks."""
