"""The gRPC process: `python -m web.grpc_server` serves `lf.a2a.v1.A2AService`
on TOOLNEXUS_GRPC_HOST:TOOLNEXUS_GRPC_PORT, beside (not inside) the HTTP
front end, on the same store and broker, so any number of either can run.

It is wired as `create_app` wires the HTTP edge (the store, the Celery
dispatcher, the bearer check, the methods), with the gRPC settings: one
thread per call in flight (an open stream holds one; TOOLNEXUS_GRPC_THREADS
bounds them, and a call beyond that is refused RESOURCE_EXHAUSTED, not
queued), the largest message either way, HTTP/2 keepalive pings. SIGTERM
or SIGINT stops taking calls and gives open ones TOOLNEXUS_GRPC_GRACE
seconds to finish; streams still open then are cancelled, which ends them
at once (their followers are woken). With TOOLNEXUS_GRPC_TLS_CERT and
TOOLNEXUS_GRPC_TLS_KEY the port speaks TLS (spec §10.1); without, plaintext
HTTP/2 for a mesh or proxy that terminates TLS in front.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

import grpc
from a2a.types import a2a_pb2_grpc

from shared.broker.dispatch import CeleryDispatcher
from shared.logs import configure_logging
from shared.metrics import serve_metrics
from shared.settings import Settings
from shared.store import EventStore
from shared.wiring import load_hook, open_store
from web.auth import authenticator_for
from web.browsers import browser_policy
from web.card_views import CardViews
from web.grpc_service import A2AGrpcService, ExtendedCard
from web.methods import Tasks
from web.metrics import count_queued
from web.skills import load_skills

log = logging.getLogger(__name__)


@dataclass
class GrpcServer:
    server: Any  # grpc.Server
    port: int  # the one bound
    close: Callable[[], None]  # closes the store and dispatcher, after stop

    def stop(self, grace: float) -> None:
        self.server.stop(grace).wait()
        self.close()


def build(settings: Settings) -> GrpcServer:
    """The gRPC process's server, wired as `create_app` wires the HTTP edge,
    bound and started."""
    store = open_store(settings, None)
    dispatcher = CeleryDispatcher(settings, on_queued=count_queued)
    tasks = Tasks(settings, store, dispatcher, load_hook(settings))
    authenticator = authenticator_for(settings)
    running = serve(settings, A2AGrpcService(tasks, authenticator, extended_card(settings, tasks)))

    def close() -> None:
        dispatcher.close()
        closing = getattr(store, "close", None)
        if callable(closing):
            closing()

    return dataclasses.replace(running, close=close)


def serve(settings: Settings, service: A2AGrpcService) -> GrpcServer:
    """`service` on the gRPC settings' port, started: what a launcher that
    already holds the methods (the embedded one) calls to add the binding."""
    keepalive_ms = int(settings.grpc_keepalive * 1000)
    server = grpc.server(
        ThreadPoolExecutor(settings.grpc_threads, thread_name_prefix="grpc"),
        maximum_concurrent_rpcs=settings.grpc_threads,
        options=[
            ("grpc.max_receive_message_length", settings.grpc_max_message),
            ("grpc.max_send_message_length", settings.grpc_max_message),
            ("grpc.keepalive_time_ms", keepalive_ms),
            ("grpc.keepalive_timeout_ms", min(keepalive_ms, 20_000)),
            ("grpc.keepalive_permit_without_calls", 1),
            # a client may ping as often as the server does
            ("grpc.http2.min_ping_interval_without_data_ms", min(keepalive_ms, 10_000)),
        ],
    )
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(service, server)  # type: ignore[no-untyped-call]
    address = f"{settings.grpc_host}:{settings.grpc_port}"
    if settings.grpc_tls_cert is not None and settings.grpc_tls_key is not None:
        pair = (settings.grpc_tls_key.encode(), settings.grpc_tls_cert.encode())
        port = server.add_secure_port(address, grpc.ssl_server_credentials([pair]))
    else:
        port = server.add_insecure_port(address)
    server.start()
    return GrpcServer(server, port, lambda: None)


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
        streaming=isinstance(tasks.store, EventStore),
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
    running = build(settings)
    if settings.metrics_port is not None:
        serve_metrics(settings.host, settings.metrics_port)
    log.info("gRPC A2AService listening on %s:%d", settings.grpc_host, running.port)
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    stopping.wait()
    log.info("stopping: open calls get %g s to finish", settings.grpc_grace)
    running.stop(settings.grpc_grace)


if __name__ == "__main__":
    main()
