"""The gRPC server: `lf.a2a.v1.A2AService` on TOOLNEXUS_GRPC_HOST:TOOLNEXUS_GRPC_PORT,
in a process of its own (`python -m web.grpc.server`, what `toolnexus-serve
grpc` runs: beside, not inside, the HTTP front end, on the same store and
broker, so any number of either can run) or in the embedded server's
process (`serve`).

It is wired as `create_app` wires the HTTP edge (the store, the Celery
dispatcher, the bearer check, the methods), with the gRPC settings: the
calls in flight (TOOLNEXUS_GRPC_CALLS; a call beyond that is refused
RESOURCE_EXHAUSTED, not queued), the largest message either way, HTTP/2
keepalive pings. The process serves on grpc.aio (`web.grpc.aio`): unary
calls on a pool of threads (GetTask, one short read, on the loop), streams
on the event loop, so an open stream, which mostly waits on its task's
watch, holds no thread. The embedded
server, on gevent, serves the synchronous servicer with grpcio in its
gevent mode, where each call is a greenlet. SIGTERM
or SIGINT stops taking calls and gives open ones TOOLNEXUS_GRPC_GRACE
seconds to finish; streams still open then are cancelled, which ends them
at once (their followers are closed). With TOOLNEXUS_GRPC_TLS_CERT and
TOOLNEXUS_GRPC_TLS_KEY the port speaks TLS (spec §10.1); without, plaintext
HTTP/2 for a mesh or proxy that terminates TLS in front. Nothing here
imports Flask.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

import grpc

from shared.broker.dispatch import CeleryDispatcher
from shared.ops.collector import start_collector
from shared.ops.logs import configure_logging
from shared.ops.metrics import serve_metrics
from shared.settings import Settings
from shared.store.wiring import load_hook, open_store
from web.auth.tokens import authenticator_for
from web.card.skills import load_skills
from web.card.views import CardViews
from web.core.tasks import Tasks
from web.grpc.aio import AsyncA2AGrpcService
from web.grpc.service import A2AGrpcService, ExtendedCard
from web.grpc.wire import add_service
from web.http.browsers import browser_policy
from web.http.metrics import count_queued

log = logging.getLogger(__name__)


@dataclass
class GrpcServer:
    server: Any  # grpc.Server
    port: int  # the one bound

    def stop(self, grace: float) -> None:
        self.server.stop(grace).wait()


def methods(settings: Settings) -> tuple[A2AGrpcService, Callable[[], None]]:
    """The binding on the process's own methods, wired as `create_app` wires
    the HTTP edge; and what closes the store and dispatcher, after a stop."""
    store = open_store(settings, None)
    dispatcher = CeleryDispatcher(settings, on_queued=count_queued)
    tasks = Tasks(settings, store, dispatcher, load_hook(settings))
    authenticator = authenticator_for(settings)

    def close() -> None:
        dispatcher.close()
        store.close()

    return A2AGrpcService(tasks, authenticator, extended_card(settings, tasks)), close


def serve(settings: Settings, service: A2AGrpcService) -> GrpcServer:
    """`service` on grpcio's synchronous server on the gRPC settings' port,
    started: what a launcher that already holds the methods (the embedded
    one, on gevent) calls to add the binding."""
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
    ]


def _bind(settings: Settings, server: Any) -> int:
    address = f"{settings.grpc_host}:{settings.grpc_port}"
    if settings.grpc_tls_cert is not None and settings.grpc_tls_key is not None:
        pair = (settings.grpc_tls_key.encode(), settings.grpc_tls_cert.encode())
        port: int = server.add_secure_port(address, grpc.ssl_server_credentials([pair]))
    else:
        port = server.add_insecure_port(address)
    return port


def extended_card(settings: Settings, tasks: Tasks) -> ExtendedCard | None:
    """GetExtendedAgentCard's card when TOOLNEXUS_EXTENDED_CARD is set; its
    JSON-RPC URL is TOOLNEXUS_URL's, or where the HTTP server listens."""
    if settings.extended_card is None:
        return None
    skills = load_skills(settings.skills, settings.skill_names) if settings.skills else []
    cards = CardViews(
        settings,
        skills,
        browser_policy(settings, strict_hosts=False),
        authenticator_for(settings).card_schemes(),
        streaming=True,  # every store can be followed (the adapter polls)
        push=tasks.push is not None,
        overrides=settings.card or {},
        extended_fields=settings.extended_card,
    )
    url = settings.url or f"http://{settings.host}:{settings.port}/"
    return partial(cards.extended_at, url)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve lf.a2a.v1.A2AService over gRPC.")
    parser.add_argument("--host", help="overrides TOOLNEXUS_GRPC_HOST")
    parser.add_argument("--port", type=int, help="overrides TOOLNEXUS_GRPC_PORT")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    given = {"grpc_host": args.host, "grpc_port": args.port}
    settings = dataclasses.replace(settings, **{k: v for k, v in given.items() if v is not None})
    configure_logging(settings)
    start_collector(settings.gc_freeze_every, settings.gc_thaw_every)
    asyncio.run(_serve_until_signalled(settings))


async def _serve_until_signalled(settings: Settings) -> None:
    service, close = methods(settings)
    servicer = AsyncA2AGrpcService(service)
    server = grpc.aio.server(
        options=_options(settings), maximum_concurrent_rpcs=settings.grpc_calls
    )
    add_service(servicer, server)
    port = _bind(settings, server)
    await server.start()
    if settings.metrics_port is not None:
        serve_metrics(settings.host, settings.metrics_port)
    log.info("gRPC A2AService listening on %s:%d", settings.grpc_host, port)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    await stopping.wait()
    log.info("stopping: open calls get %g s to finish", settings.grpc_grace)
    await server.stop(settings.grpc_grace)
    servicer.close()
    close()


if __name__ == "__main__":
    main()
