"""The broker side: task names, the Celery dispatcher, the Redis transport and queue,
RabbitMQ's queue declarations."""
