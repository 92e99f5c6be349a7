"""The HTTP edge every binding stands on: WSGI requests and replies, hang-up
detection, browser screening, request observation, and the gevent and
gunicorn servers."""
