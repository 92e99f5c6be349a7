"""The task console: server-rendered pages and one script that call the A2A API."""
