"""Front-end requests per second through gunicorn, beside a trivial baseline.

    python3 bench/web.py [--seconds 8] [--connections 32]

Starts a private redis-server on a free port, then, one after the other,
gunicorn with the repo's gunicorn.conf.py serving
  * the baseline: a trivial Flask app answering POST with one Redis GET, and
  * the front end (`web:create_app()`) on the Redis store, with the Celery
    dispatcher publishing to a real broker on the same private Redis,
and drives each with the same load generator at the same concurrency
(`wrk` when installed, else a threaded Python client). Prints GetTask and
SendMessage (toolnexus dialect: returns at once) requests per second and
their ratio to the baseline; the issue's aim is GetTask >= 0.8x. Ratios are
what to compare across machines: load generator, gunicorn and Redis all
share one box.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.redis_server import RedisServer, free_port  # noqa: E402

BASELINE_KEY = "bench:task"


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


def rpc_body(method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()


def post(port: int, body: bytes) -> dict[str, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("POST", "/", body, {"Content-Type": "application/json"})
    reply: dict[str, Any] = json.loads(connection.getresponse().read())
    connection.close()
    return reply


class Gunicorn:
    def __init__(self, app: str, env: dict[str, str]) -> None:
        self.port = free_port()
        command = [
            sys.executable,
            "-m",
            "gunicorn",
            "-c",
            str(ROOT / "gunicorn.conf.py"),
            "-b",
            f"127.0.0.1:{self.port}",
            "--log-level",
            "warning",
            app,
        ]
        self.process = subprocess.Popen(command, cwd=ROOT, env={**os.environ, **env})
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                http.client.HTTPConnection("127.0.0.1", self.port, timeout=1).connect()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"gunicorn {app} did not start")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def load_wrk(port: int, body: bytes, seconds: float, connections: int) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n')
        script.write(f"wrk.body = {json.dumps(body.decode())}\n")
    try:
        output = subprocess.run(
            [
                "wrk",
                "-t2",
                f"-c{connections}",
                f"-d{seconds:g}s",
                "-s",
                script.name,
                f"http://127.0.0.1:{port}/",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        os.unlink(script.name)
    if "Non-2xx" in output:
        raise RuntimeError(f"errors under load:\n{output}")
    match = re.search(r"Requests/sec:\s+([\d.]+)", output)
    assert match, output
    return float(match.group(1))


def load_python(port: int, body: bytes, seconds: float, connections: int) -> float:
    """The fallback generator: one keep-alive connection per thread."""
    counts = [0] * connections
    stop_at = time.monotonic() + seconds

    def drive(index: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        headers = {"Content-Type": "application/json"}
        while time.monotonic() < stop_at:
            connection.request("POST", "/", body, headers)
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status} under load")
            counts[index] += 1
        connection.close()

    threads = [threading.Thread(target=drive, args=(i,)) for i in range(connections)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.monotonic() - started)


def measure(port: int, body: bytes, seconds: float, connections: int) -> float:
    load = load_wrk if shutil.which("wrk") else load_python
    load(port, body, min(2.0, seconds), connections)  # warm up pools and connections
    return load(port, body, seconds, connections)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()
    generator = "wrk" if shutil.which("wrk") else "python threads"
    print(
        f"load: {generator}, {args.connections} connections, {args.seconds:g} s per run;"
        f" gunicorn.conf.py, {os.cpu_count()} CPUs"
    )

    redis_server = RedisServer().start()
    servers: list[Gunicorn] = []
    try:
        env = {
            "TOOLNEXUS_STORE": f"{redis_server.url}/1",
            "TOOLNEXUS_BROKER_URL": f"{redis_server.url}/2",
            "TOOLNEXUS_QUEUE": "bench",
            "TOOLNEXUS_LOG_LEVEL": "WARNING",
        }
        web = Gunicorn("web:create_app()", env)
        servers.append(web)
        message = {"role": "user", "messageId": "bench", "parts": [{"kind": "text", "text": "hi"}]}
        send = rpc_body("SendMessage", {"message": message})
        task = post(web.port, send)["result"]
        get = rpc_body("GetTask", {"id": task["id"]})
        assert post(web.port, get)["result"]["id"] == task["id"]

        import redis

        stored = redis.Redis.from_url(f"{redis_server.url}/1").get(f"toolnexus:task:{task['id']}")
        redis.Redis.from_url(f"{redis_server.url}/0").set(BASELINE_KEY, stored or b"null")
        get_rate = measure(web.port, get, args.seconds, args.connections)
        send_rate = measure(web.port, send, args.seconds, args.connections)
        web.stop()

        baseline = Gunicorn(f"bench.web:baseline_app('{redis_server.url}/0')", {})
        servers.append(baseline)
        assert post(baseline.port, get)["result"]["id"] == task["id"]
        base_rate = measure(baseline.port, get, args.seconds, args.connections)
        baseline.stop()
    finally:
        for server in servers:
            server.stop()
        redis_server.close()

    print(f"{'baseline (Flask, 1 Redis GET)':<34} {base_rate:>9,.0f} req/s")
    for name, rate in (("GetTask", get_rate), ("SendMessage (+ Celery publish)", send_rate)):
        print(f"{name:<34} {rate:>9,.0f} req/s   {rate / base_rate:.2f}x baseline")
    aim = "met" if get_rate >= 0.8 * base_rate else "NOT met"
    print(f"aim GetTask >= 0.8x baseline: {aim}")


if __name__ == "__main__":
    main()
