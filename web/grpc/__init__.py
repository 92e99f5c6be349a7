"""The gRPC binding of A2A 1.0: the service on the transport-free core, its
wire translation, the grpc.aio server and its process."""
