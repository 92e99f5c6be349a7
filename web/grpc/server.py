"""The gRPC servers: `lf.a2a.v1.A2AService` on TOOLNEXUS_GRPC_HOST:TOOLNEXUS_GRPC_PORT,
on grpc.aio in the gRPC process (`aio_server`, for `web.grpc_process`) or on
grpcio's synchronous server in the embedded server's process (`serve`).

Both take the gRPC settings: the calls in flight (TOOLNEXUS_GRPC_CALLS; a
call beyond that is refused RESOURCE_EXHAUSTED, not queued), the largest
message either way, HTTP/2 keepalive pings. The process serves on grpc.aio
(`web.grpc.aio`): unary calls on a pool of threads (GetTask, one short read,
on the loop), streams and 1.1's long-poll GetTasks on the event loop, so an open
stream or a long-poll, which mostly waits on its task's watch, takes no
thread. The embedded server, on gevent,
serves the synchronous servicer with grpcio in its gevent mode, where each
call is a greenlet. With TOOLNEXUS_GRPC_TLS_CERT and TOOLNEXUS_GRPC_TLS_KEY
the port speaks TLS (spec §10.1); without, plaintext HTTP/2 for a mesh or
proxy that terminates TLS in front. Nothing here imports Flask.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc

from shared.addresses import listening_socket
from shared.settings import Settings
from web.grpc.aio import AsyncA2AGrpcService
from web.grpc.service import A2AGrpcService
from web.grpc.wire import add_service


@dataclass
class GrpcServer:
    server: Any  # grpc.Server
    port: int  # the one bound

    def stop(self, grace: float) -> None:
        self.server.stop(grace).wait()


def serve(settings: Settings, service: A2AGrpcService) -> GrpcServer:
    """`service` on grpcio's synchronous server on the gRPC settings' port,
    started: what a launcher that already holds the methods (the embedded
    one, on gevent, on its app's assembly) calls to add the binding."""
    server = grpc.server(
        # Under gevent's patch (the embedded server) its threads are
        # greenlets, made as calls come.
        ThreadPoolExecutor(settings.grpc_calls, thread_name_prefix="grpc"),
        maximum_concurrent_rpcs=settings.grpc_calls,
        options=_options(settings),
    )
    add_service(service, server)
    port = _bind(settings, server)
    server.start()
    return GrpcServer(server, port)


def aio_server(settings: Settings, servicer: AsyncA2AGrpcService) -> tuple[Any, int]:
    """`servicer` on a grpc.aio server (not started yet) on the gRPC
    settings' port, and the port it is bound to."""
    server = grpc.aio.server(
        options=_options(settings), maximum_concurrent_rpcs=settings.grpc_calls
    )
    add_service(servicer, server)
    return server, _bind(settings, server)


def _options(settings: Settings) -> list[tuple[str, int]]:
    keepalive_ms = int(settings.grpc_keepalive * 1000)
    return [
        ("grpc.max_receive_message_length", settings.grpc_max_message),
        ("grpc.max_send_message_length", settings.grpc_max_message),
        ("grpc.keepalive_time_ms", keepalive_ms),
        ("grpc.keepalive_timeout_ms", min(keepalive_ms, 20_000)),
        ("grpc.keepalive_permit_without_calls", 1),
        # a client may ping as often as the server does
        ("grpc.http2.min_ping_interval_without_data_ms", min(keepalive_ms, 10_000)),
        # grpcio sets SO_REUSEPORT by default: a second server on a taken port
        # would bind beside the first and take half its connections, old code
        # or another store behind it, instead of failing.
        ("grpc.so_reuseport", 0),
    ]


def _bind(settings: Settings, server: Any) -> int:
    """The port bound; `PortInUse` (or an `OSError` saying why) when it
    cannot be, as every role that listens says it."""
    host, port = settings.grpc_host, settings.grpc_port
    address = f"{host}:{port}"
    try:
        if settings.grpc_tls_cert is not None and settings.grpc_tls_key is not None:
            pair = (settings.grpc_tls_key.encode(), settings.grpc_tls_cert.encode())
            bound: int = server.add_secure_port(address, grpc.ssl_server_credentials([pair]))
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError:
        # grpcio says only "Failed to bind": a plain socket tells why.
        listening_socket(host, port).close()
        raise
    return bound
