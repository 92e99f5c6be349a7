"""The transport-free request handler (`handler`): the `Tasks` methods, the
call context (`call`), the method table every binding reads
(`method_table`), the A2A version asked for, params, listing, streams and
errors."""
