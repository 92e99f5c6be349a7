"""The processes a benchmark starts and tears down itself, and how to look at them.

Every server gets a free port on 127.0.0.1 and runs in its own process
group, so stopping it also stops its workers. `rss_kib` and `children`
read /proc, so memory is measured without extra packages.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.redis_server import free_port  # noqa: E402

# The project's packages and bench/ import from the checkout, whatever the cwd.
PYTHONPATH = {
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
}


def wait_for_port(port: int, process: subprocess.Popen[bytes], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} before listening")
        try:
            http.client.HTTPConnection("127.0.0.1", port, timeout=1).connect()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on port {port} within {timeout:g} s")


class Server:
    """A command serving HTTP on a free port (`{port}` in the command is
    replaced), in its own process group; ready once the port accepts."""

    def __init__(
        self, what: str, command: Sequence[str], env: Mapping[str, str], timeout: float = 30
    ) -> None:
        self.what = what
        self.port = free_port()
        self.process = subprocess.Popen(
            [part.replace("{port}", str(self.port)) for part in command],
            cwd=ROOT,
            env={**os.environ, **PYTHONPATH, **env},
            start_new_session=True,
        )
        try:
            wait_for_port(self.port, self.process, what, timeout)
        except RuntimeError:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def workers(self, settle: float = 1.0, timeout: float = 20.0) -> list[int]:
        """The serving processes: the children of a master (once their number
        has not changed for `settle` seconds: workers boot one by one), else
        the process itself."""
        deadline = time.monotonic() + timeout
        found, since = children(self.process.pid), time.monotonic()
        while time.monotonic() - since < settle and time.monotonic() < deadline:
            time.sleep(0.1)
            now = children(self.process.pid)
            if now != found:
                found, since = now, time.monotonic()
        return found or [self.process.pid]

    def stop(self) -> None:
        stop_group(self.process)


def gunicorn(
    app: str, env: Mapping[str, str], what: str | None = None, flags: Sequence[str] = ()
) -> Server:
    """gunicorn with the project's own web.http.gunicorn_conf (workers, worker class,
    timeouts); `flags` override it."""
    command = [sys.executable, "-m", "gunicorn", "-c", "python:web.http.gunicorn_conf"]
    command += ["-b", "127.0.0.1:{port}", "--log-level", "warning", *flags, app]
    return Server(what or f"gunicorn {app}", command, env)


def uvicorn(factory: str, env: Mapping[str, str], workers: int, what: str) -> Server:
    command = [sys.executable, "-m", "uvicorn", "--factory", factory, "--host", "127.0.0.1"]
    command += ["--port", "{port}", "--workers", str(workers), "--log-level", "warning"]
    command += ["--no-access-log"]
    return Server(what, command, env)


def finish_task(store_url: str, task_id: str) -> None:
    """Move a submitted task to completed through the store contract, as a
    worker would where a benchmark runs none."""
    from shared.events import to_state
    from shared.store.resolve import resolve_store
    from shared.task import COMPLETED, WORKING
    from shared.transitions import transition

    store = resolve_store(store_url)
    try:
        for state in (WORKING, COMPLETED):
            assert transition(store, task_id, to_state(state)).applied, state
    finally:
        store.close()


def exit_on_sigterm() -> None:
    """Make SIGTERM (from timeout(1) or a watchdog) exit through `finally`
    blocks: the servers started here run in sessions of their own, outside
    the caller's process group, and would otherwise outlive the benchmark."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


class CeleryWorker:
    """A `celery -A <app> worker` subprocess, ready once it logged `ready`;
    `command` starts it another way (`toolnexus-serve worker`), with the
    same name and flags after it.

    Its log goes to a file, not a pipe: a pipe would need a thread in the
    benchmark's own process to drain it, competing with the client being
    measured for the interpreter whenever the worker logs (a burst per
    completed task)."""

    def __init__(
        self,
        app: str,
        env: Mapping[str, str],
        name: str,
        flags: Sequence[str] = (),
        command: Sequence[str] = (),
    ) -> None:
        start = list(command) or [sys.executable, "-m", "celery", "-A", app, "worker", "-l", "INFO"]
        command = [*start, "-n", f"{name}@%h", *flags]
        # Closed (and removed) in stop().
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-{name}-", suffix=".log")  # noqa: SIM115
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**os.environ, **PYTHONPATH, **env},
            stdout=subprocess.DEVNULL,
            stderr=self.log,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while b" ready." not in Path(self.log.name).read_bytes():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"celery {app} did not start: {self.output()[-2000:]}")
            time.sleep(0.1)

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> None:
        stop_group(self.process, timeout=20)
        self.log.close()


def stop_group(
    process: subprocess.Popen[bytes] | subprocess.Popen[str], timeout: float = 15
) -> None:
    """SIGTERM the process group, SIGKILL it if it lingers."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command name is in parentheses and may hold spaces: split after it
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found.append(int(entry.name))
    return sorted(found)


async def post_alone(
    port: int,
    body: bytes,
    headers: Mapping[str, str],
    timeout: float,
    written: Callable[[], object] = lambda: None,
) -> bytes:
    """POST `body` to 127.0.0.1:`port` on a connection of its own (closed
    after the answer); the answer's body. `written()` is called once the
    request is written, so a caller can time the server alone."""
    head = "".join(
        f"{name}: {value}\r\n"
        for name, value in {
            "Host": f"127.0.0.1:{port}",
            **headers,
            "Content-Length": str(len(body)),
            "Connection": "close",
        }.items()
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"POST / HTTP/1.1\r\n{head}\r\n".encode() + body)
        await writer.drain()
        written()
        raw = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
    return raw.partition(b"\r\n\r\n")[2]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) process `pid` has used, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (p50: fraction 0.5); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = min(len(ordered), max(1, math.ceil(fraction * len(ordered))))
    return ordered[rank - 1]


def in_checkout(checkout: Path, script: str, *args: str, timeout: float = 600) -> str:
    """What `script` (Python source) prints, run with `args` in another
    checkout's directory: its own code first on `sys.path`, this
    interpreter's dependencies (how a benchmark sets two checkouts side by
    side)."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=checkout,
        env={"PYTHONPATH": str(checkout), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    return done.stdout.strip()


def side_by_side_options(description: str) -> argparse.Namespace:
    """The command line of a bench that sets this checkout beside another:
    the other's directory, rounds, calls a measure and the threads making them."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("other", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=4)
    return parser.parse_args()


# A measure's place in a side-by-side run: (group, step), e.g. ("redis", "take").
Case = tuple[str, str]


def side_by_side(
    checkouts: Mapping[str, Path], rounds: int, cases: Sequence[Case], measure: Callable[..., float]
) -> dict[tuple[str, str, str], list[float]]:
    """`measure(checkout name, group, step)` for every case in each checkout,
    `rounds` times, the checkouts' order alternating by round so neither
    always goes first: (group, step, checkout name) -> one figure a round."""
    figures: dict[tuple[str, str, str], list[float]] = {}
    for round_ in range(rounds):
        order = list(checkouts) if round_ % 2 == 0 else list(reversed(checkouts))
        for group, step in cases:
            for name in order:
                figures.setdefault((group, step, name), []).append(measure(name, group, step))
    return figures


def print_ratios(
    figures: Mapping[tuple[str, str, str], list[float]], cases: Sequence[Case], heading: str
) -> None:
    """Each case's median in "this" and "other" checkouts and the median of
    the per-round ratios (this over other), then every figure as JSON."""
    print(f"{heading:10} {'step':16} {'this /s':>10} {'other /s':>10} {'ratio':>6}")
    for group, step in cases:
        this, other = figures[(group, step, "this")], figures[(group, step, "other")]
        ratio = statistics.median(a / b for a, b in zip(this, other, strict=True))
        print(
            f"{group:10} {step:16} {statistics.median(this):10.0f}"
            f" {statistics.median(other):10.0f} {ratio:6.2f}"
        )
    print(json.dumps({"/".join(key): value for key, value in figures.items()}))


def timed_threads(work: Callable[[int], object], count: int) -> float:
    """Seconds from starting `count` threads, thread `i` running `work(i)`,
    to the end of the last."""
    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.monotonic() - started
