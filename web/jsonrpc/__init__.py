"""The JSON-RPC 2.0 binding at `POST /`: the envelope, dialects and method
names (`binding`), and its endpoint on the HTTP edge (`endpoint`)."""
