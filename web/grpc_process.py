"""The gRPC process: `lf.a2a.v1.A2AService` in a process of its own
(`python -m web.grpc_process`, what `toolnexus-serve grpc` runs: beside,
not inside, the HTTP front end, on the same store and broker, so any number
of either can run).

It serves the parts `web.assembly` builds for every process (the store, the
Celery dispatcher, the bearer check, the methods, the extended card) on
grpc.aio (`web.grpc.server.aio_server`, with the gRPC settings). SIGTERM or
SIGINT stops taking calls and gives open ones TOOLNEXUS_GRPC_GRACE seconds
to finish; streams still open then are cancelled, which ends them at once
(their followers are closed). `service_on` is the binding on any assembly:
the embedded server serves its app's on its own gRPC port
(`web.grpc.server.serve`). Nothing here imports Flask.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import signal
import sys
from collections.abc import Callable

from shared.ops.collector import start_collector
from shared.ops.logs import configure_logging
from shared.ops.metrics import serve_metrics
from shared.settings import Settings
from shared.store.wiring import abilities_of, open_store
from web.assembly import Assembly, assemble, celery_dispatcher
from web.grpc.aio import AsyncA2AGrpcService
from web.grpc.server import aio_server
from web.grpc.service import A2AGrpcService

log = logging.getLogger(__name__)


def service_on(assembly: Assembly) -> A2AGrpcService:
    """The binding on an assembly's methods, bearer check and extended card
    (GetExtendedAgentCard's, when TOOLNEXUS_EXTENDED_CARD is set)."""
    return A2AGrpcService(assembly.tasks, assembly.authenticator, assembly.extended_card_at_url)


def servicer(settings: Settings) -> tuple[AsyncA2AGrpcService, Callable[[], None]]:
    """The binding on the process's own assembly (`web.assembly`, as the HTTP
    process's), served from the event loop; and what closes it, the store
    and the dispatcher, after a stop."""
    store = open_store(settings, None)
    dispatcher = celery_dispatcher(settings)
    service = service_on(assemble(settings, store, dispatcher))
    loop_reads = abilities_of(store).loop_reads
    reads = loop_reads() if loop_reads is not None else None
    served = AsyncA2AGrpcService(
        service, short_sends=dispatcher.sends_in_one_round_trip, reads=reads
    )

    def close() -> None:
        served.close()
        dispatcher.close()
        store.close()

    return served, close


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
    served, close = servicer(settings)
    try:
        server, port = aio_server(settings, served)
    except OSError as error:  # the port taken, or not ours to listen on: one line
        close()
        print(f"toolnexus-serve grpc: {error}", file=sys.stderr)
        raise SystemExit(2) from None
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
    close()


if __name__ == "__main__":
    main()
