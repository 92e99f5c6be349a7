"""The HTTP edge the JSON-RPC and HTTP+JSON bindings stand on: WSGI requests
and replies, request bodies, hang-up detection, browser screening, request
observation and metrics (the gRPC binding shares the last two), and the
gevent and gunicorn servers."""
