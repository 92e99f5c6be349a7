"""Front-end requests per second, beside baselines and the official a2a-sdk server.

    python3 bench/web.py [--rounds 5] [--seconds 5] [--connections 32] [--quick] [--rest-only]
                         [--postgres-only] [--js] [--paired]

Starts, all at once and each on a free port:
  * this service: gunicorn with the packaged web.http.gunicorn_conf (its worker class
    and worker count) serving `web:create_app()` on a private redis-server
    (store on db 1, the Celery broker on db 2; no Celery worker runs, so a
    send is measured up to its publish, as a peer sees it);
  * the trivial baseline: a Flask app answering POST with one Redis GET of a
    stored task, under the same web.http.gunicorn_conf (same serving model);
  * the a2a-sdk server (bench/sdk_peer.py) in one uvicorn process, on its
    InMemoryTaskStore; its echo agent runs in that process after a
    non-blocking send has been answered;
  * the a2a-sdk server on its DatabaseTaskStore (PostgreSQL at --postgres, a
    table of its own, dropped afterwards) with as many uvicorn workers as
    gunicorn has;
  * this service again on its own PostgreSQL store, on the same server and
    database (a schema of its own, migrated by `db upgrade`'s code and
    dropped afterwards), beside the SDK's.

Then drives each with the same load generator (`wrk` when installed, else
Python threads) at the same concurrency, A2A 1.0 wire unless the dialect
says otherwise: GetTask, and SendMessage that returns at once
(`returnImmediately`), each request with a fresh messageId (a repeated one
would measure the idempotent duplicate path); both over JSON-RPC and over
HTTP+JSON (`GET /tasks/{id}`, `POST /message:send`), this service's and the
in-memory a2a-sdk server's REST app. `--rest-only` measures just those
(this service's two bindings and the in-memory SDK's), for a short run;
`--postgres-only` just the four on PostgreSQL (this service's and the
DatabaseTaskStore's GetTask and SendMessage), to iterate on that store;
`--js` measures this service against the official JavaScript SDK's server
instead (bench/js/peer.mjs: express, its InMemoryTaskStore, the echo agent
in the same node process; `npm ci` in bench/js first): the gunicorn front
end on Redis and the embedded server (`toolnexus-serve`, memory store, the
echo agent in process), GetTask of a finished task (and, for gunicorn, of
one still running) and SendMessage, all over JSON-RPC 1.0.
`--paired` also drives the two loads of each ratio at the same time (Python
threads, the connections shared), which on a machine others are loading
compares them under the same conditions. Every response is checked:
a non-200 status or a JSON-RPC error fails the run. The measurements are
interleaved, round by round (each round in a rotated order), and each
figure is the median over the rounds; each ratio is the median of the
per-round ratios, so it compares runs made seconds apart. Ratios are what
to compare: load generator and servers all share one box.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.processes import Server, exit_on_sigterm, finish_task, gunicorn, timed_threads, uvicorn
from tests.support.redis_server import RedisServer

BASELINE_KEY = "bench:task"
PLACEHOLDER = "@ID@"  # in a body template: replaced by a fresh id per request
POSTGRES = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
A2A_10 = {"A2A-Version": "1.0"}
SEND = "/message:send"  # HTTP+JSON's SendMessage


def baseline_app(redis_url: str) -> Any:
    """The trivial endpoint: read the body, one Redis GET, answer JSON."""
    import redis
    from flask import Flask, jsonify, request

    app = Flask("baseline")
    client = redis.Redis.from_url(redis_url)

    @app.post("/")
    def answer() -> Any:
        request.get_data()
        raw = client.get(BASELINE_KEY)
        return jsonify({"jsonrpc": "2.0", "id": 1, "result": json.loads(raw or b"null")})

    return app


# --- requests --------------------------------------------------------------------------


def rpc_body(method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()


def post(
    port: int,
    body: bytes | None,
    headers: dict[str, str] | None = None,
    *,
    verb: str = "POST",
    path: str = "/",
) -> dict[str, Any]:
    """One request; its JSON-RPC reply, or its HTTP+JSON one (`path` not /)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    sent = {"Content-Type": "application/json", **(headers or {})}
    connection.request(verb, path, body, sent)
    response = connection.getresponse()
    reply: dict[str, Any] = json.loads(response.read())
    connection.close()
    if response.status != 200 or ("result" not in reply and path == "/"):
        raise RuntimeError(f"port {port}: {verb} {path}: HTTP {response.status} {reply}")
    return reply


def rest_send() -> bytes:
    """SendMessage as HTTP+JSON's `POST /message:send` body: the bare request."""
    params: dict[str, Any] = json.loads(send_v10())["params"]
    return json.dumps(params).encode()


def fresh(template: bytes) -> bytes:
    return template.replace(PLACEHOLDER.encode(), uuid.uuid4().hex.encode())


def send_v10() -> bytes:
    message = {"role": "ROLE_USER", "messageId": PLACEHOLDER, "parts": [{"text": "hi"}]}
    return rpc_body(
        "SendMessage", {"message": message, "configuration": {"returnImmediately": True}}
    )


def send_toolnexus() -> bytes:
    """The toolnexus dialect: 0.3 shapes, no header, returns at once by default."""
    message = {"role": "user", "messageId": PLACEHOLDER, "parts": [{"kind": "text", "text": "hi"}]}
    return rpc_body("SendMessage", {"message": message})


@dataclass(frozen=True)
class Load:
    """One thing to measure: a request (its body a template) sent to a server."""

    name: str
    port: int
    body: bytes
    headers: dict[str, str]
    verb: str = "POST"
    path: str = "/"  # JSON-RPC's; an HTTP+JSON route otherwise

    def check(self) -> None:
        """It works once, before it is measured."""
        post(self.port, fresh(self.body) or None, self.headers, verb=self.verb, path=self.path)


# --- load generators -------------------------------------------------------------------

# wrk: the body is built per request when it holds the placeholder; every
# response is checked, and the errors of all threads are summed in done().
WRK_SCRIPT = """
wrk.method = {verb}
wrk.headers["Content-Type"] = "application/json"
{headers}
local head, tail = {head}, {tail}
local templated = {templated}
if not templated and head ~= "" then wrk.body = head end
local threads = {{}}
function setup(thread)
  table.insert(threads, thread)
  thread:set("number", #threads)
end
function init(args)
  errors = 0
  counter = 0
  prefix = args[1] .. "-" .. number .. "-"
end
if templated then
  function request()
    counter = counter + 1
    return wrk.format(nil, nil, nil, head .. prefix .. counter .. tail)
  end
end
function response(status, headers, body)
  if status ~= 200 or string.find(body, '"error"', 1, true) then errors = errors + 1 end
end
function done(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(threads) do total = total + thread:get("errors") end
  io.write(string.format("bench-errors: %d\\n", total))
end
"""


def wrk_script(load: Load) -> str:
    text = load.body.decode()
    head, templated, tail = text.partition(PLACEHOLDER)
    headers = "\n".join(
        f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in load.headers.items()
    )
    return WRK_SCRIPT.format(
        verb=json.dumps(load.verb),
        headers=headers,
        head=json.dumps(head),
        tail=json.dumps(tail),
        templated="true" if templated else "false",
    )


def load_wrk(load: Load, seconds: float, connections: int, label: str) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(wrk_script(load))
    try:
        command = ["wrk", "-t2", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "10s"]
        command += ["-s", script.name, f"http://127.0.0.1:{load.port}{load.path}", "--", label]
        output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(script.name)
    errors = re.search(r"bench-errors: (\d+)", output)
    socket_errors = re.search(r"Socket errors:.*", output)
    if errors is None or int(errors.group(1)) or socket_errors:
        raise RuntimeError(f"{load.name}: errors under load:\n{output}")
    match = re.search(r"Requests/sec:\s+([\d.]+)", output)
    assert match, output
    return float(match.group(1))


def load_python(load: Load, seconds: float, connections: int, label: str) -> float:
    """The fallback generator: one keep-alive connection per thread."""
    return load_together([load], seconds, connections, label)[0]


def load_together(loads: list[Load], seconds: float, connections: int, label: str) -> list[float]:
    """Drive `loads` at the same time, `connections` shared out among them,
    one keep-alive connection per thread: each load's requests per second,
    under the same conditions as the others' (on a shared machine, runs made
    one after the other are not)."""
    counts = [0] * connections
    failures: list[str] = []
    stop_at = time.monotonic() + seconds

    def drive(index: int) -> None:
        load = loads[index % len(loads)]
        templated = PLACEHOLDER.encode() in load.body
        connection = http.client.HTTPConnection("127.0.0.1", load.port, timeout=10)
        headers = {"Content-Type": "application/json", **load.headers}
        while time.monotonic() < stop_at:
            body = (fresh(load.body) if templated else load.body) or None
            connection.request(load.verb, load.path, body, headers)
            response = connection.getresponse()
            reply = response.read()
            if response.status != 200 or b'"error"' in reply:
                failures.append(f"{load.name}: HTTP {response.status}: {reply[:200]!r}")
                return
            counts[index] += 1
        connection.close()

    elapsed = timed_threads(drive, connections)
    if failures:
        raise RuntimeError(f"{label}: errors under load: {failures[0]}")
    return [sum(counts[i :: len(loads)]) / elapsed for i in range(len(loads))]


Generator = Callable[[Load, float, int, str], float]


# --- the servers -----------------------------------------------------------------------


def service_env(redis_url: str) -> dict[str, str]:
    """This service's settings here: the store on db 1, the broker on db 2."""
    return {
        "TOOLNEXUS_STORE": f"{redis_url}/1",
        "TOOLNEXUS_BROKER_URL": f"{redis_url}/2",
        "TOOLNEXUS_QUEUE": "bench",
        "TOOLNEXUS_LOG_LEVEL": "WARNING",
    }


# Room in the turn book for every send of a run, for a day.
ROOM_SLOTS = 10**9
ROOM_TTL = 86_400.0


def make_room(env: dict[str, str]) -> None:
    """Register slots in the turn book as an idle fleet with room would, so
    every send is taken and published at once. No Celery worker runs here:
    with no slots registered the window is one, every send after the first
    would stay held, and its publish would go unmeasured."""
    from shared.settings import Settings
    from shared.store.wiring import open_store

    store = open_store(Settings.from_env(env))
    book = store.turn_book()
    if book is not None:
        book.register("bench-room", ROOM_SLOTS, ROOM_TTL)
    store.close()


@dataclass
class Fleet:
    loads: dict[str, Load]
    workers: int  # gunicorn's worker processes (and the PostgreSQL peer's)


def start_all(
    redis_url: str,
    postgres: str,
    table: str,
    servers: list[Server],
    callbacks: list[Any],
    *,
    rest_only: bool = False,
    postgres_only: bool = False,
) -> Fleet:
    env = service_env(redis_url)
    make_room(env)
    if postgres_only:
        ours_on_postgres = _toolnexus_on_postgres(postgres, env, servers, callbacks)
        workers = len(ours_on_postgres.workers())
        on_postgres = _on_postgres(ours_on_postgres, postgres, table, workers, servers, callbacks)
        return _checked(on_postgres, workers)
    web = gunicorn("web:create_app()", env, "this service")
    servers.append(web)
    workers = len(web.workers())
    task = post(web.port, fresh(send_v10()), A2A_10)["result"]["task"]
    get_v10 = rpc_body("GetTask", {"id": task["id"]})
    assert post(web.port, get_v10, A2A_10)["result"]["id"] == task["id"]
    import redis

    stored = redis.Redis.from_url(f"{redis_url}/1").hget(f"toolnexus:task:{task['id']}", "doc")
    assert stored, "the stored task was not found where the Redis store keeps it"
    memory = uvicorn("bench.sdk_peer:create_app", {}, 1, "a2a-sdk in-memory")
    servers.append(memory)

    def rest_get(port: int, task_id: str) -> Load:
        return Load("", port, b"", A2A_10, "GET", f"/tasks/{task_id}")

    memory_get = _peer_get(memory)
    sdk_task_id = json.loads(memory_get)["params"]["id"]
    both = [
        Load("toolnexus GetTask", web.port, get_v10, A2A_10),
        Load("toolnexus SendMessage", web.port, send_v10(), A2A_10),
        replace(rest_get(web.port, task["id"]), name="toolnexus GetTask, HTTP+JSON"),
        Load("toolnexus SendMessage, HTTP+JSON", web.port, rest_send(), A2A_10, "POST", SEND),
        Load("sdk memory GetTask", memory.port, memory_get, A2A_10),
        Load("sdk memory SendMessage", memory.port, send_v10(), A2A_10),
        replace(rest_get(memory.port, sdk_task_id), name="sdk memory GetTask, HTTP+JSON"),
        Load("sdk memory SendMessage, HTTP+JSON", memory.port, rest_send(), A2A_10, "POST", SEND),
    ]
    if rest_only:
        return _checked(both, workers)

    redis.Redis.from_url(f"{redis_url}/0").set(BASELINE_KEY, stored)
    trivial = gunicorn(f"bench.web:baseline_app('{redis_url}/0')", env, "trivial Flask")
    servers.append(trivial)
    assert post(trivial.port, get_v10)["result"]["id"] == task["id"]
    ours_on_postgres = _toolnexus_on_postgres(postgres, env, servers, callbacks)
    on_postgres = _on_postgres(ours_on_postgres, postgres, table, workers, servers, callbacks)
    get_toolnexus = rpc_body("GetTask", {"id": task["id"]})
    loads = [
        *both,
        Load("toolnexus GetTask, toolnexus dialect", web.port, get_toolnexus, {}),
        Load("toolnexus SendMessage, toolnexus dialect", web.port, send_toolnexus(), {}),
        Load("trivial GetTask", trivial.port, get_v10, A2A_10),
        *on_postgres,
    ]
    return _checked(loads, workers)


def start_js(redis_url: str, servers: list[Server]) -> Fleet:
    """The gunicorn front end on Redis, the embedded server on memory and
    the a2a-js express server, and GetTask and SendMessage on each."""
    peer_dir = Path(__file__).resolve().parent / "js"
    if not (peer_dir / "node_modules").is_dir():
        raise SystemExit("bench/js has no node_modules: run `npm ci` in bench/js first")
    env = service_env(redis_url)
    make_room(env)
    web = gunicorn("web:create_app()", env, "this service")
    servers.append(web)
    workers = len(web.workers())
    running = post(web.port, fresh(send_v10()), A2A_10)["result"]["task"]["id"]
    finished = post(web.port, fresh(send_v10()), A2A_10)["result"]["task"]["id"]
    finish_task(f"{redis_url}/1", finished)
    embedded = Server(
        "the embedded server",
        [sys.executable, "-m", "worker.cli.main", "--port", "{port}", "--store", "memory"],
        {"TOOLNEXUS_LOG_LEVEL": "WARNING"},
    )
    servers.append(embedded)
    js = Server("the a2a-js express server", ["node", str(peer_dir / "peer.mjs"), "{port}"], {})
    servers.append(js)
    loads = [
        Load("toolnexus GetTask, finished", web.port, _get_body(finished), A2A_10),
        Load("toolnexus GetTask, running", web.port, _get_body(running), A2A_10),
        Load("toolnexus SendMessage", web.port, send_v10(), A2A_10),
        Load("embedded GetTask, finished", embedded.port, _finished_get(embedded), A2A_10),
        Load("embedded SendMessage", embedded.port, send_v10(), A2A_10),
        Load("a2a-js GetTask, finished", js.port, _finished_get(js), A2A_10),
        Load("a2a-js SendMessage", js.port, send_v10(), A2A_10),
    ]
    return _checked(loads, workers)


def _get_body(task_id: str) -> bytes:
    return rpc_body("GetTask", {"id": task_id})


def _finished_get(server: Server) -> bytes:
    """GetTask of a task sent to `server` just now, once its in-process agent
    finished it."""
    task_id = post(server.port, fresh(send_v10()), A2A_10)["result"]["task"]["id"]
    body = _get_body(task_id)
    deadline = time.monotonic() + 10
    while post(server.port, body, A2A_10)["result"]["status"]["state"] != "TASK_STATE_COMPLETED":
        if time.monotonic() > deadline:
            raise RuntimeError(f"{server.what}: task {task_id} did not complete")
        time.sleep(0.05)
    return body


def _peer_get(server: Server) -> bytes:
    """GetTask of a task sent to `server` just now."""
    sdk_task = post(server.port, fresh(send_v10()), A2A_10)["result"]["task"]
    body = rpc_body("GetTask", {"id": sdk_task["id"]})
    assert post(server.port, body, A2A_10)["result"]["id"] == sdk_task["id"]
    return body


def _on_postgres(
    ours: Server,
    postgres: str,
    table: str,
    workers: int,
    servers: list[Server],
    callbacks: list[Any],
) -> list[Load]:
    """The a2a-sdk on its DatabaseTaskStore (as many workers as ours), and
    GetTask and SendMessage on it and on `ours`, this service on PostgreSQL."""
    from bench.sdk_peer import drop_table, prepare_table

    prepare_table(postgres, table)
    callbacks.append(lambda: drop_table(postgres, table))
    database = uvicorn(
        "bench.sdk_peer:create_app",
        {"BENCH_SDK_STORE": postgres, "BENCH_SDK_TABLE": table},
        workers,
        f"a2a-sdk on PostgreSQL, {workers} workers",
    )
    servers.append(database)
    return [
        Load("sdk postgres GetTask", database.port, _peer_get(database), A2A_10),
        Load("sdk postgres SendMessage", database.port, send_v10(), A2A_10),
        Load("toolnexus postgres GetTask", ours.port, _peer_get(ours), A2A_10),
        Load("toolnexus postgres SendMessage", ours.port, send_v10(), A2A_10),
    ]


def _toolnexus_on_postgres(
    sdk_url: str, env: dict[str, str], servers: list[Server], callbacks: list[Any]
) -> Server:
    """This service on a PostgreSQL store in the SDK's database: a schema of
    its own, migrated here and dropped afterwards."""
    import psycopg

    from shared.stores.postgres import schema

    url = re.sub(r"^postgresql\+\w+://", "postgresql://", sdk_url)
    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        schema.upgrade(conn, name)

    def drop() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")

    callbacks.append(drop)
    separator = "&" if "?" in url else "?"
    store = {**env, "TOOLNEXUS_STORE": f"{url}{separator}schema={name}"}
    server = gunicorn("web:create_app()", store, "this service on PostgreSQL")
    servers.append(server)
    return server


def _checked(loads: list[Load], workers: int) -> Fleet:
    for load in loads:  # every request works once before it is measured
        load.check()
    return Fleet({load.name: load for load in loads}, workers)


# --- the run ---------------------------------------------------------------------------


def measure_all(
    fleet: Fleet, generator: Generator, rounds: int, seconds: float, connections: int
) -> dict[str, list[float]]:
    names = list(fleet.loads)
    for name in names:  # warm up pools and connections
        generator(fleet.loads[name], 1.0, connections, f"warm-{uuid.uuid4().hex[:8]}")
    rates: dict[str, list[float]] = {name: [] for name in names}
    for round_number in range(rounds):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            label = f"r{round_number}-{uuid.uuid4().hex[:8]}"
            rates[name].append(generator(fleet.loads[name], seconds, connections, label))
        print(f"  round {round_number + 1}/{rounds} done", flush=True)
    return rates


RATIOS = (
    # (what, ours, theirs, aim or None)
    (
        "HTTP+JSON GetTask vs JSON-RPC GetTask",
        "toolnexus GetTask, HTTP+JSON",
        "toolnexus GetTask",
        0.9,
    ),
    (
        "HTTP+JSON SendMessage vs JSON-RPC SendMessage",
        "toolnexus SendMessage, HTTP+JSON",
        "toolnexus SendMessage",
        0.9,
    ),
    (
        "HTTP+JSON GetTask vs a2a-sdk REST in-memory",
        "toolnexus GetTask, HTTP+JSON",
        "sdk memory GetTask, HTTP+JSON",
        1.3,
    ),
    (
        "HTTP+JSON SendMessage vs a2a-sdk REST in-memory",
        "toolnexus SendMessage, HTTP+JSON",
        "sdk memory SendMessage, HTTP+JSON",
        1.3,
    ),
    ("GetTask vs trivial Flask + 1 Redis GET", "toolnexus GetTask", "trivial GetTask", 1.0),
    ("GetTask vs a2a-sdk in-memory", "toolnexus GetTask", "sdk memory GetTask", 1.3),
    ("SendMessage vs a2a-sdk in-memory", "toolnexus SendMessage", "sdk memory SendMessage", 3.0),
    ("GetTask vs a2a-sdk on PostgreSQL", "toolnexus GetTask", "sdk postgres GetTask", 5.0),
    (
        "SendMessage vs a2a-sdk on PostgreSQL",
        "toolnexus SendMessage",
        "sdk postgres SendMessage",
        5.0,
    ),
    (
        "GetTask, both on PostgreSQL: ours vs a2a-sdk",
        "toolnexus postgres GetTask",
        "sdk postgres GetTask",
        5.0,
    ),
    (
        "SendMessage, both on PostgreSQL: ours vs a2a-sdk",
        "toolnexus postgres SendMessage",
        "sdk postgres SendMessage",
        5.0,
    ),
    (
        "gunicorn on Redis vs a2a-js: GetTask, finished",
        "toolnexus GetTask, finished",
        "a2a-js GetTask, finished",
        1.0,
    ),
    (
        "gunicorn on Redis vs a2a-js: GetTask, running",
        "toolnexus GetTask, running",
        "a2a-js GetTask, finished",
        None,
    ),
    (
        "gunicorn on Redis vs a2a-js: SendMessage",
        "toolnexus SendMessage",
        "a2a-js SendMessage",
        0.8,
    ),
    (
        "embedded on memory vs a2a-js: GetTask",
        "embedded GetTask, finished",
        "a2a-js GetTask, finished",
        1.0,
    ),
    (
        "embedded on memory vs a2a-js: SendMessage",
        "embedded SendMessage",
        "a2a-js SendMessage",
        1.0,
    ),
    (
        "toolnexus dialect: GetTask vs trivial",
        "toolnexus GetTask, toolnexus dialect",
        "trivial GetTask",
        None,
    ),
    (
        "toolnexus dialect: SendMessage vs a2a-sdk in-memory",
        "toolnexus SendMessage, toolnexus dialect",
        "sdk memory SendMessage",
        None,
    ),
)


def measure_paired(
    fleet: Fleet, rounds: int, seconds: float, connections: int
) -> dict[str, list[float]]:
    """Each ratio's two loads driven at the same time, `connections` shared:
    per round, the ratio of their rates."""
    pairs = [(what, ours, theirs) for what, ours, theirs, _ in RATIOS if ours in fleet.loads]
    pairs = [pair for pair in pairs if pair[2] in fleet.loads]
    ratios: dict[str, list[float]] = {what: [] for what, _, _ in pairs}
    for round_number in range(rounds):
        for what, ours, theirs in pairs:
            label = f"p{round_number}-{uuid.uuid4().hex[:8]}"
            loads = [fleet.loads[ours], fleet.loads[theirs]]
            mine, other = load_together(loads, seconds, connections, label)
            ratios[what].append(mine / other)
        print(f"  paired round {round_number + 1}/{rounds} done", flush=True)
    return ratios


def report_paired(ratios: dict[str, list[float]]) -> None:
    print("\nratios of loads driven at the same time (median, then each round's)")
    aims = {what: aim for what, _, _, aim in RATIOS}
    for what, values in ratios.items():
        ratio = statistics.median(values)
        runs = " ".join(f"{value:.2f}" for value in values)
        aim = aims[what]
        verdict = "" if aim is None else f"aim >= {aim:g}x: {'met' if ratio >= aim else 'NOT met'}"
        print(f"  {what:<52} {ratio:>6.2f}x  [{runs}]  {verdict}")


def report(rates: dict[str, list[float]], fleet: Fleet) -> None:
    print(f"\nreq/s, median of {len(next(iter(rates.values())))} runs (each run's figure after it)")
    for name, values in rates.items():
        runs = " ".join(f"{value:,.0f}" for value in values)
        print(f"  {name:<44} {statistics.median(values):>9,.0f}   [{runs}]")
    print(
        "\nratios (median of the per-round ratios, lowest-highest in brackets);"
        f" gunicorn and the PostgreSQL peer: {fleet.workers} workers"
    )
    for what, ours, theirs, aim in RATIOS:
        if ours not in rates or theirs not in rates:
            continue  # not measured in this run (--rest-only)
        pairs = zip(rates[ours], rates[theirs], strict=True)
        per_round = [a / b for a, b in pairs if b > 0]
        if not per_round:  # the baseline answered nothing in every round
            print(f"  {what:<52}    n/a  ({theirs}: no request completed)")
            continue
        ratio = statistics.median(per_round)
        spread = f"{min(per_round):.2f}-{max(per_round):.2f}"
        verdict = "" if aim is None else f"aim >= {aim:g}x: {'met' if ratio >= aim else 'NOT met'}"
        print(f"  {what:<52} {ratio:>6.2f}x  ({spread})  {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--seconds", type=float, default=5.0, help="per run (default 5)")
    parser.add_argument("--connections", type=int, default=32, help="default 32")
    parser.add_argument("--postgres", default=POSTGRES, help=f"SQLAlchemy URL (default {POSTGRES})")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 rounds of 2 s")
    parser.add_argument(
        "--rest-only",
        action="store_true",
        help="only GetTask and SendMessage over both bindings, here and on the in-memory SDK",
    )
    parser.add_argument(
        "--postgres-only",
        action="store_true",
        help="only GetTask and SendMessage on PostgreSQL, here and on the a2a-sdk's database store",
    )
    parser.add_argument(
        "--js",
        action="store_true",
        help="against the a2a-js express server: gunicorn on Redis and the embedded server",
    )
    parser.add_argument(
        "--paired",
        action="store_true",
        help="also drive each ratio's two loads at the same time, sharing the connections",
    )
    args = parser.parse_args()
    exit_on_sigterm()
    if args.quick:
        args.rounds, args.seconds = 2, 2.0
    generator: Generator = load_wrk if shutil.which("wrk") else load_python
    print(
        f"load: {'wrk' if shutil.which('wrk') else 'python threads'}, {args.connections}"
        f" connections, {args.rounds} interleaved rounds of {args.seconds:g} s per figure;"
        f" {os.cpu_count()} CPUs",
        flush=True,
    )
    redis_server = RedisServer().start()
    servers: list[Server] = []
    callbacks: list[Any] = []
    table = f"bench_sdk_{uuid.uuid4().hex[:8]}"
    try:
        fleet = (
            start_js(redis_server.url, servers)
            if args.js
            else start_all(
                redis_server.url,
                args.postgres,
                table,
                servers,
                callbacks,
                rest_only=args.rest_only,
                postgres_only=args.postgres_only,
            )
        )
        rates = measure_all(fleet, generator, args.rounds, args.seconds, args.connections)
        paired = (
            measure_paired(fleet, args.rounds, args.seconds, args.connections)
            if args.paired
            else None
        )
    finally:
        for server in reversed(servers):
            server.stop()
        for callback in callbacks:
            callback()
        redis_server.close()
    report(rates, fleet)
    if paired is not None:
        report_paired(paired)


if __name__ == "__main__":
    main()
