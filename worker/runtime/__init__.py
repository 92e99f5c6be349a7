"""The Celery runtime: the app and its tasks, beat, cancel, the pools, the
signals, Flower's login and the health probes."""
