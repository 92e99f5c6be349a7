"""The gRPC binding of A2A 1.0 and the 1.1 draft: the service on the
transport-free core, its wire translation, the grpc.aio server and its process."""
