"""What a big message costs the embedded memory store, in memory.

    python3 bench/message_memory.py [--messages 30] [--size 1048576] [--agent examples.agents:echo]

Serves the app in this process (memory store, in-process workers, as the
embedded server does), sends `messages` blocking SendMessage calls each
carrying one text part of `size` characters, waits for each task to finish,
and prints the process's growth in resident memory per message and what
the store itself holds per message (its snapshots, tails and logs, as the
interpreter counts them), both as a multiple of the message's size.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shared import Settings
from shared.stores.memory.store import memory_store
from tests.support.sizes import kept_by
from web import create_app
from worker.engine.agent import load_agent
from worker.engine.inprocess import InProcessDispatcher


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=30)
    parser.add_argument("--size", type=int, default=1024 * 1024, help="characters per message")
    parser.add_argument("--agent", default="examples.agents:echo")
    args = parser.parse_args()
    settings = Settings(run=args.agent, max_body=args.size * 2 + 65536)
    store = memory_store()
    dispatcher = InProcessDispatcher(store, load_agent(settings), settings, threads=2)
    http = create_app(settings, store=store, dispatcher=dispatcher).test_client()
    headers = {"A2A-Version": "1.0"}

    def send(text: str) -> dict[str, Any]:
        message = {"role": "ROLE_USER", "messageId": uuid.uuid4().hex, "parts": [{"text": text}]}
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
        reply: dict[str, Any] = http.post("/", json=body, headers=headers).json  # type: ignore[assignment]
        return reply

    send("warm up")
    gc.collect()
    before, kept_before = rss_bytes(), kept_by(store)
    for n in range(args.messages):
        reply = send(f"{n:06d}" + "x" * (args.size - 6))
        assert "result" in reply, reply
    gc.collect()
    grown = (rss_bytes() - before) / args.messages
    kept = (kept_by(store) - kept_before) / args.messages
    print(f"{args.messages} messages of {args.size} characters, agent {args.agent}")
    print(f"  RSS growth per message   {grown / 2**20:.2f} MiB ({grown / args.size:.1f}x)")
    print(f"  store holds per message  {kept / 2**20:.2f} MiB ({kept / args.size:.1f}x)")
    dispatcher.close(timeout=5)


if __name__ == "__main__":
    main()
