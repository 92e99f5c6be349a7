"""The Celery runtime: the app and its tasks, what Celery records for each
delivery, beat, cancel, the pools, the signal handlers, the start-up hooks,
Flower's login and the health probes."""
