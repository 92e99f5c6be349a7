"""Where Redis is: one server named by its URL, or the master a Sentinel group names.

`url` reads the URL forms without importing redis (settings check them in
every process); `pools` makes the connection pools the store, the event
listener and the broker's direct sender use, so all of them follow the
master the same way when Sentinel moves it.
"""
