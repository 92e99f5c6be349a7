"""The HTTP+JSON binding of A2A 1.0: its routes and the WSGI app that serves them."""
