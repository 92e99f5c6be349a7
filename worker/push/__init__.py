"""Push delivery: a task's events to its webhooks, from a Celery task
(`worker.runtime.app`) or the embedded server's thread."""
