"""`toolnexus-serve` as a subprocess on a free port, for end-to-end tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

from tests.support.polling import wait_for
from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent.parent


def command() -> list[str]:
    script = shutil.which("toolnexus-serve")
    return [script] if script else [sys.executable, "-m", "worker.embedded"]


@contextmanager
def embedded_server(folder: Path, env: dict[str, str]) -> Iterator[tuple[str, int]]:
    """toolnexus-serve with `env` (and no other TOOLNEXUS_* variable) on a free
    loopback port; yields (host, port) once it answers /healthz."""
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TOOLNEXUS_")}
    log = (folder / f"toolnexus-serve-{port}.log").open("wb")
    process = subprocess.Popen(
        [*command(), "--port", str(port)],
        cwd=folder,
        env={**clean, **env, "PYTHONPATH": str(ROOT)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def healthy() -> bool:
        assert process.poll() is None, (folder / log.name).read_text(errors="replace")
        try:
            return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).ok
        except (requests.ConnectionError, requests.Timeout):
            return False  # not listening yet, or too busy starting to answer in time

    try:
        wait_for(healthy, timeout=90, what="toolnexus-serve to answer")
        yield "127.0.0.1", port
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()
