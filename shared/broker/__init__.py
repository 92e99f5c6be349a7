"""The broker: which queue a task goes to, and how it gets there (Redis or RabbitMQ)."""
