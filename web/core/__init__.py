"""The transport-free request handler: the `Tasks` methods, the call context,
the method table every binding reads, params, listing, streams and errors."""
