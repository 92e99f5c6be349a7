"""Clients that act as real ones do and write every operation into a History.

- senders (JSON-RPC 0.3 `message/send`, HTTP+JSON 1.0 `POST
  /message:send` and gRPC `SendMessage`, one binding each) retry an unanswered send with the same
  messageId until it is acknowledged, and send some messages once more
  after their acknowledgement (a client that lost the answer); on JSON-RPC
  every fourth message asks for a webhook (a `Receiver` path of its own,
  some answering 503 first), and one in ten asks back (`ask:`): the sender
  waits for `input-required` and replies on the task, retrying with the
  reply's own messageId;
- pollers read tasks acknowledged so far (`tasks/get`), and a canceller
  cancels some of them (`tasks/cancel`: the task it answers is a read);
- streamers send with `message/stream` and resume with `tasks/resubscribe`
  and Last-Event-ID whenever the stream breaks, until the task ends;
- walkers page through ListTasks (1.0) again and again.

Every message's text is `sleep <s> <name>-<n>`, unique in the run: the
scripted agent (`tests.support.agents.scripted`) logs each run of it and
answers `ran: <name>-<n>`.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from typing import Any

import grpc
import requests
from a2a.types import a2a_pb2, a2a_pb2_grpc

from tests.support.history import TERMINAL, History, state_of
from tests.support.sse import Stream
from tests.support.webhook_receiver import Receiver

SEND_PATIENCE = 90.0  # seconds a sender retries one message before giving up
AGENT_SECONDS = 0.1
# Between two messages of one sender: a load the fleet drains between faults
# (unpaced, non-blocking senders queue faster than two workers run, and the
# backlog's tasks all wait past the stale threshold: beat re-sends them all).
SEND_PAUSE = (0.05, 0.15)


NEVER = "\u0000never completes"


def expected_result(text: str) -> str:
    """What the run of a message with `text` answers (an `ask:` run asks back)."""
    if text.startswith("ask: "):
        return NEVER
    return "ran: " + text.split(" ", 2)[2]


class Clients:
    def __init__(
        self,
        url: str,
        history: History,
        *,
        seed: int,
        receiver: Receiver | None = None,
        grpc_target: str | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.grpc_target = grpc_target
        self.history = history
        self.receiver = receiver
        self.stop = threading.Event()
        self._seed = seed
        self._threads: list[threading.Thread] = []

    def start(
        self, *, senders: int = 4, pollers: int = 1, streamers: int = 1, walkers: int = 1
    ) -> None:
        bindings = ["jsonrpc", "rest", *(["grpc"] if self.grpc_target else [])]
        roles: list[tuple[str, Any, tuple[Any, ...]]] = [
            (f"send-{i}", self._sender, (bindings[i % len(bindings)],)) for i in range(senders)
        ]
        roles += [(f"get-{i}", self._poller, ()) for i in range(pollers)]
        roles += [("cancel-0", self._canceller, ())]
        roles += [(f"stream-{i}", self._streamer, ()) for i in range(streamers)]
        roles += [(f"list-{i}", self._walker, ()) for i in range(walkers)]
        for name, target, args in roles:
            thread = threading.Thread(target=target, args=(name, *args), name=name, daemon=True)
            self._threads.append(thread)
            thread.start()

    def close(self, timeout: float = SEND_PATIENCE + 30) -> None:
        """Stop taking new work; wait for each client's operation in flight."""
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout)

    # --- senders ------------------------------------------------------------

    def _sender(self, name: str, binding: str) -> None:
        rng = random.Random(f"{self._seed}-{name}")
        for n in range(1_000_000):
            if self.stop.wait(rng.uniform(*SEND_PAUSE)):
                return
            asks = binding == "jsonrpc" and rng.random() < 0.1
            text = f"ask: {name}-{n}" if asks else f"sleep {AGENT_SECONDS} {name}-{n}"
            message_id = uuid.uuid4().hex
            hook = None
            if self.receiver is not None and binding == "jsonrpc" and n % 4 == 0:
                hook = f"/hook/{name}/{n}"
                if n % 8 == 0:
                    self.receiver.script(hook, (503, {}))  # a retry's worth
            start = time.monotonic()
            acks, attempts = self._send(binding, message_id, text, hook)
            if acks and rng.random() < 0.2:
                acks += self._send(binding, message_id, text, hook)[0]  # the answer was lost
            reply, replied, refused = None, [], None
            if acks and asks and self._asked(acks[0]):
                reply = f"sleep {AGENT_SECONDS} reply-{name}-{n}"
                replied, refused = self._reply(acks[0], reply)
            self.history.record(
                name,
                "send",
                start,
                bool(acks),
                message_id=message_id,
                text=text,
                task_id=acks[0] if acks else None,
                acks=acks,
                attempts=attempts,
                binding=binding,
                hook=hook,
                reply=reply,  # sent: applied, or perhaps applied with its answer lost
                replied=replied,
                reply_refused=refused,
            )

    def _asked(self, task_id: str) -> bool:
        """Whether the task came to ask back (False: it ended first, or never did)."""
        deadline = time.monotonic() + SEND_PATIENCE / 3
        body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": task_id}}
        while time.monotonic() < deadline and not self.stop.is_set():
            try:
                state = state_of(
                    requests.post(f"{self.url}/", json=body, timeout=10).json()["result"]
                )
            except (requests.RequestException, ValueError, KeyError):
                state = ""
            if state == "input-required":
                return True
            if state in TERMINAL:
                return False
            time.sleep(0.1)
        return False

    def _reply(self, task_id: str, text: str) -> tuple[list[str], str | None]:
        """A follow-up on the task, retried with its messageId while the fleet
        cannot take it; the tasks it was acknowledged as, and the error that
        refused it for good (the task having ended meanwhile, say)."""
        parts = [{"kind": "text", "text": text}]
        message = {"role": "user", "messageId": uuid.uuid4().hex, "taskId": task_id, "parts": parts}
        params = {"message": message, "configuration": {"blocking": False}}
        body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": params}
        deadline = time.monotonic() + SEND_PATIENCE
        while time.monotonic() < deadline:
            try:
                answer = requests.post(f"{self.url}/", json=body, timeout=10).json()
            except (requests.RequestException, ValueError):
                time.sleep(0.1)
                continue
            if "result" in answer:
                return [str(answer["result"]["id"])], None
            error = answer.get("error", {})
            if error.get("code") != -32603:
                return [], f"{error.get('code')} {error.get('message', '')}"[:200]
            time.sleep(0.1)  # a store or broker out of reach: said again
        return [], "no answer"

    def _send(
        self, binding: str, message_id: str, text: str, hook: str | None = None
    ) -> tuple[list[str], int]:
        deadline = time.monotonic() + SEND_PATIENCE
        attempts = 0
        while time.monotonic() < deadline:
            attempts += 1
            try:
                if binding == "jsonrpc":
                    task_id = self._send_rpc(message_id, text, hook)
                elif binding == "rest":
                    task_id = self._send_rest(message_id, text)
                else:
                    task_id = self._send_grpc(message_id, text)
            except (requests.RequestException, grpc.RpcError, ValueError, KeyError, TypeError):
                task_id = None
            if task_id:
                return [task_id], attempts
            time.sleep(0.1)
        return [], attempts

    def _send_rpc(self, message_id: str, text: str, hook: str | None) -> str | None:
        message = {
            "role": "user",
            "messageId": message_id,
            "parts": [{"kind": "text", "text": text}],
        }
        configuration: dict[str, Any] = {"blocking": False}
        if hook is not None and self.receiver is not None:
            configuration["pushNotificationConfig"] = {"url": self.receiver.url(hook)}
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "message/send",
            "params": {"message": message, "configuration": configuration},
        }
        reply = requests.post(f"{self.url}/", json=body, timeout=10).json()
        return str(reply["result"]["id"]) if "result" in reply else None

    def _send_rest(self, message_id: str, text: str) -> str | None:
        body = {
            "message": {"role": "ROLE_USER", "messageId": message_id, "parts": [{"text": text}]},
            "configuration": {"blocking": False},
        }
        answer = requests.post(
            f"{self.url}/message:send", json=body, headers={"A2A-Version": "1.0"}, timeout=10
        )
        if answer.status_code != 200:
            return None
        return str(answer.json()["task"]["id"])

    def _send_grpc(self, message_id: str, text: str) -> str | None:
        assert self.grpc_target is not None
        message = a2a_pb2.Message(
            role=a2a_pb2.Role.ROLE_USER, message_id=message_id, parts=[a2a_pb2.Part(text=text)]
        )
        configuration = a2a_pb2.SendMessageConfiguration(return_immediately=True)
        request = a2a_pb2.SendMessageRequest(message=message, configuration=configuration)
        # A channel a send: a killed gRPC process leaves no channel waiting on it.
        with grpc.insecure_channel(self.grpc_target) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            sent = stub.SendMessage(request, metadata=[("a2a-version", "1.0")], timeout=10)
        return str(sent.task.id) or None

    # --- readers ------------------------------------------------------------

    def _poller(self, name: str) -> None:
        rng = random.Random(f"{self._seed}-{name}")
        while not self.stop.is_set():
            known = list(self.history.acknowledged())
            if not known:
                time.sleep(0.1)
                continue
            task_id = rng.choice(known[-50:])
            start = time.monotonic()
            body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": task_id}}
            try:
                reply = requests.post(f"{self.url}/", json=body, timeout=10).json()
                task = reply["result"]
            except (requests.RequestException, ValueError, KeyError):
                time.sleep(0.1)
                continue
            self.history.record(name, "get", start, True, task_id=task_id, state=state_of(task))
            time.sleep(0.02)

    def _canceller(self, name: str) -> None:
        rng = random.Random(f"{self._seed}-{name}")
        while not self.stop.wait(rng.uniform(0.2, 0.8)):
            known = list(self.history.acknowledged())
            if not known:
                continue
            task_id = rng.choice(known[-10:])
            start = time.monotonic()
            body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/cancel", "params": {"id": task_id}}
            try:
                reply = requests.post(f"{self.url}/", json=body, timeout=10).json()
            except (requests.RequestException, ValueError):
                continue
            if "result" in reply:  # (an ended task is not cancelable: an error)
                state = state_of(reply["result"])
                self.history.record(name, "get", start, True, task_id=task_id, state=state)

    def _streamer(self, name: str) -> None:
        for n in range(1_000_000):
            if self.stop.is_set():
                return
            self._follow(name, f"sleep {AGENT_SECONDS * 5} {name}-{n}")

    def _follow(self, name: str, text: str) -> None:
        message = {
            "role": "user",
            "messageId": uuid.uuid4().hex,
            "parts": [{"kind": "text", "text": text}],
        }
        events: list[tuple[int, str, str]] = []
        task_id: str | None = None
        start = time.monotonic()
        deadline = start + SEND_PATIENCE
        while time.monotonic() < deadline:
            try:
                if task_id is None:
                    stream = Stream(self.url, "message/stream", {"message": message}, version=None)
                else:
                    stream = Stream(
                        self.url,
                        "tasks/resubscribe",
                        {"id": task_id},
                        version=None,
                        last_event_id=events[-1][0] if events else None,
                    )
                if stream.is_stream:
                    for event in stream:
                        result = event.data.get("result")
                        if result is None or event.id is None:
                            continue
                        task_id = str(result.get("taskId") or result.get("id"))
                        kind = str(result.get("kind"))
                        state = state_of(result) if "status" in result else events[-1][2]
                        events.append((event.id, kind, state))
                        if state in TERMINAL:
                            self._streamed(name, start, text, task_id, events, True)
                            return
            except (requests.RequestException, ValueError, IndexError):
                pass
            time.sleep(0.1)
        self._streamed(name, start, text, task_id, events, False)

    def _streamed(
        self,
        name: str,
        start: float,
        text: str,
        task_id: str | None,
        events: list[tuple[int, str, str]],
        ended: bool,
    ) -> None:
        self.history.record(name, "stream", start, ended, text=text, task_id=task_id, events=events)
        if task_id is not None:
            # A streamed message is acknowledged once its task is named.
            self.history.record(
                name,
                "send",
                start,
                True,
                message_id=f"stream:{task_id}",
                text=text,
                task_id=task_id,
                acks=[task_id],
                attempts=1,
                binding="jsonrpc-stream",
            )

    def _walker(self, name: str) -> None:
        rng = random.Random(f"{self._seed}-{name}")
        while not self.stop.is_set():
            size = rng.choice((5, 7, 20, 50))
            start = time.monotonic()
            ids: list[str] = []
            token = ""
            try:
                while True:
                    params = {"pageSize": size, "pageToken": token}
                    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": params}
                    reply = requests.post(
                        f"{self.url}/", json=body, headers={"A2A-Version": "1.0"}, timeout=10
                    ).json()
                    result = reply["result"]
                    ids += [task["id"] for task in result["tasks"]]
                    token = result["nextPageToken"]
                    if not token:
                        break
            except (requests.RequestException, ValueError, KeyError):
                self.history.record(name, "list", start, False, ids=ids)
                time.sleep(0.2)
                continue
            self.history.record(name, "list", start, True, ids=ids, size=size)
            time.sleep(0.2)
