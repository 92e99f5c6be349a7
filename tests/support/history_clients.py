"""Clients that act as real ones do and write every operation into a History.

- senders (JSON-RPC 0.3 `message/send`, HTTP+JSON 1.0 `POST
  /message:send` and gRPC `SendMessage`, one binding each) retry an
  unanswered send with the same messageId until it is acknowledged, and
  send some messages once more after their acknowledgement (a client that
  lost the answer); on JSON-RPC every fourth message asks for a webhook (a
  `Receiver` path of its own, some answering 503 first, some deleted soon
  after the send is acknowledged: `tasks/pushNotificationConfig/delete`),
  and one in ten asks back (`ask:`): the sender waits for `input-required`
  and replies on the task, retrying with the reply's own messageId;
- pollers read tasks acknowledged so far (GetTask on each binding in
  turn), and a canceller cancels some of them (CancelTask on each binding
  in turn: the task it answers is a read);
- streamers send a streaming message (JSON-RPC `message/stream`,
  HTTP+JSON `POST /message:stream`, gRPC `SendStreamingMessage`, each in
  turn) and resume after the last event they saw (`tasks/resubscribe`,
  `/tasks/{id}:subscribe` and `SubscribeToTask` with Last-Event-ID, or
  gRPC's `last-event-id` metadata) whenever the stream breaks, until the
  task ends;
- walkers page through ListTasks (1.0) again and again, on each binding
  in turn.

Every message's text is `sleep <s> <name>-<n>` (or `steps <s> ...`, or
`ask: ...`), unique in the run: the
scripted agent (`tests.support.agents.scripted`) logs each run of it and
answers `ran: <name>-<n>`.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import requests
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.protobuf import json_format

from tests.support.history import TERMINAL, History, state_of
from tests.support.sse import RestStream, Stream
from tests.support.webhook_receiver import Receiver

SEND_PATIENCE = 90.0  # seconds a sender retries one message before giving up
AGENT_SECONDS = 0.1
STEPS_SECONDS = 1.2  # a message whose webhook is deleted while it runs
# Between two messages of one sender: a load the fleet drains between faults
# (unpaced, non-blocking senders queue faster than two workers run, and the
# backlog's tasks all wait past the stale threshold: beat re-sends them all).
SEND_PAUSE = (0.05, 0.15)


NEVER = "\u0000never completes"
V10_HEADERS = {"A2A-Version": "1.0"}
V10_METADATA = (("a2a-version", "1.0"),)
EVENT_ID_FIELD = "toolnexus.eventId"  # where the gRPC binding carries an event's number
# What a call that got no usable answer raises (cut, refused, malformed, an error).
UNANSWERED = (requests.RequestException, grpc.RpcError, ValueError, KeyError, TypeError)
# A stream event's kind, by its field in a StreamResponse (HTTP+JSON, gRPC).
KINDS = {
    "task": "task",
    "statusUpdate": "status-update",
    "status_update": "status-update",
    "artifactUpdate": "artifact-update",
    "artifact_update": "artifact-update",
}


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
        self._bindings = ["jsonrpc", "rest", *(["grpc"] if grpc_target else [])]

    def start(
        self, *, senders: int = 4, pollers: int = 1, streamers: int = 1, walkers: int = 1
    ) -> None:
        bindings = self._bindings
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
            hook = None
            if self.receiver is not None and binding == "jsonrpc" and n % 4 == 0:
                hook = f"/hook/{name}/{n}"
                if n % 8 == 0:
                    self.receiver.script(hook, (503, {}))  # a retry's worth
            unhooks = hook is not None and n % 16 == 4 and not asks
            if asks:
                text = f"ask: {name}-{n}"
            elif unhooks:  # events still to come once its config is deleted
                text = f"steps {STEPS_SECONDS} {name}-{n}"
            else:
                text = f"sleep {AGENT_SECONDS} {name}-{n}"
            message_id = uuid.uuid4().hex
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
            if acks and hook is not None and unhooks and not self.stop.is_set():
                self._unhook(name, hook, acks[0], rng.uniform(0.1, STEPS_SECONDS / 2))

    def _unhook(self, name: str, hook: str, task_id: str, after: float) -> None:
        """Delete the task's webhook config `after` s on, retried while the
        fleet cannot take it; recorded once the delete is answered (a
        "not found" after a try whose answer was lost is a delete too)."""
        self.stop.wait(after)
        params = {"id": task_id, "pushNotificationConfigId": task_id}  # the inline config's id
        start = time.monotonic()
        deadline = start + SEND_PATIENCE
        while time.monotonic() < deadline:
            try:
                answer = self._rpc("tasks/pushNotificationConfig/delete", params)
            except (requests.RequestException, ValueError):
                time.sleep(0.1)
                continue
            code = answer.get("error", {}).get("code")
            if code == -32603:
                time.sleep(0.1)  # a store out of reach: said again
                continue
            deleted = "result" in answer or code == -32001
            self.history.record(name, "unhook", start, deleted, hook=hook, task_id=task_id)
            return
        self.history.record(name, "unhook", start, False, hook=hook, task_id=task_id)

    def _asked(self, task_id: str) -> bool:
        """Whether the task came to ask back (False: it ended first, or never did)."""
        deadline = time.monotonic() + SEND_PATIENCE / 3
        while time.monotonic() < deadline and not self.stop.is_set():
            try:
                state = state_of(self._rpc("tasks/get", {"id": task_id})["result"])
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
        deadline = time.monotonic() + SEND_PATIENCE
        while time.monotonic() < deadline:
            try:
                answer = self._rpc("message/send", params)
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
            except UNANSWERED:
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
        reply = self._rpc("message/send", {"message": message, "configuration": configuration})
        return str(reply["result"]["id"]) if "result" in reply else None

    def _send_rest(self, message_id: str, text: str) -> str | None:
        body = {
            "message": {"role": "ROLE_USER", "messageId": message_id, "parts": [{"text": text}]},
            "configuration": {"blocking": False},
        }
        answer = requests.post(
            f"{self.url}/message:send", json=body, headers=V10_HEADERS, timeout=10
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
        with self._stub() as stub:
            sent = stub.SendMessage(request, metadata=V10_METADATA, timeout=10)
        return str(sent.task.id) or None

    # --- readers ------------------------------------------------------------

    def _poller(self, name: str) -> None:
        rng = random.Random(f"{self._seed}-{name}")
        for n in itertools.count():
            if self.stop.is_set():
                return
            known = list(self.history.acknowledged())
            if not known:
                time.sleep(0.1)
                continue
            task_id = rng.choice(known[-50:])
            binding = self._bindings[n % len(self._bindings)]
            start = time.monotonic()
            try:
                task = self._read(binding, task_id)
            except UNANSWERED:
                time.sleep(0.1)
                continue
            if task is not None:
                self.history.record(
                    name, "get", start, True, task_id=task_id, state=state_of(task), binding=binding
                )
            time.sleep(0.02)

    def _read(self, binding: str, task_id: str) -> dict[str, Any] | None:
        """GetTask on `binding`: the task (None: not answered as one)."""
        if binding == "jsonrpc":
            reply = self._rpc("tasks/get", {"id": task_id})
            return dict(reply["result"]) if "result" in reply else None
        if binding == "rest":
            answer = requests.get(f"{self.url}/tasks/{task_id}", headers=V10_HEADERS, timeout=10)
            return dict(answer.json()) if answer.status_code == 200 else None
        with self._stub() as stub:
            found = stub.GetTask(
                a2a_pb2.GetTaskRequest(id=task_id), metadata=V10_METADATA, timeout=10
            )
        return dict(json_format.MessageToDict(found))

    def _rpc(
        self, method: str, params: dict[str, Any], headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """One JSON-RPC call: the reply (its `result` or its `error`)."""
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        reply: dict[str, Any] = requests.post(
            f"{self.url}/", json=body, headers=headers, timeout=10
        ).json()
        return reply

    @contextmanager
    def _stub(self) -> Iterator[a2a_pb2_grpc.A2AServiceStub]:
        # A channel a call: a killed gRPC process leaves no channel waiting on it.
        assert self.grpc_target is not None
        with grpc.insecure_channel(self.grpc_target) as channel:
            yield a2a_pb2_grpc.A2AServiceStub(channel)

    def _canceller(self, name: str) -> None:
        rng = random.Random(f"{self._seed}-{name}")
        for n in itertools.count():
            if self.stop.wait(rng.uniform(0.2, 0.8)):
                return
            known = list(self.history.acknowledged())
            if not known:
                continue
            task_id = rng.choice(known[-10:])
            binding = self._bindings[n % len(self._bindings)]
            start = time.monotonic()
            try:
                task = self._cancel(binding, task_id)
            except UNANSWERED:
                continue
            if task is not None:  # (an ended task is not cancelable: an error)
                state = state_of(task)
                self.history.record(
                    name, "get", start, True, task_id=task_id, state=state, binding=binding
                )

    def _cancel(self, binding: str, task_id: str) -> dict[str, Any] | None:
        """CancelTask on `binding`: the task it answers (None: refused)."""
        if binding == "jsonrpc":
            reply = self._rpc("tasks/cancel", {"id": task_id})
            return dict(reply["result"]) if "result" in reply else None
        if binding == "rest":
            url = f"{self.url}/tasks/{task_id}:cancel"
            answer = requests.post(url, json={}, headers=V10_HEADERS, timeout=10)
            return dict(answer.json()) if answer.status_code == 200 else None
        try:
            with self._stub() as stub:
                request = a2a_pb2.CancelTaskRequest(id=task_id)
                canceled = stub.CancelTask(request, metadata=V10_METADATA, timeout=10)
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.FAILED_PRECONDITION:
                return None  # not cancelable
            raise
        return dict(json_format.MessageToDict(canceled))

    def _streamer(self, name: str) -> None:
        for n in range(1_000_000):
            if self.stop.is_set():
                return
            binding = self._bindings[n % len(self._bindings)]
            self._follow(name, binding, f"sleep {AGENT_SECONDS * 5} {name}-{n}")

    def _follow(self, name: str, binding: str, text: str) -> None:
        """One streamed message on `binding`, resumed after its last event
        whenever the stream breaks, until its task ends."""
        message_id = uuid.uuid4().hex
        events: list[tuple[int, str, str]] = []
        task_id: str | None = None
        start = time.monotonic()
        deadline = start + SEND_PATIENCE
        while time.monotonic() < deadline:
            last = events[-1][0] if events else None
            try:
                for number, kind, named, state in self._stream(
                    binding, message_id, text, task_id, last
                ):
                    task_id = named
                    state = state or (events[-1][2] if events else "")
                    events.append((number, kind, state))
                    if state in TERMINAL:
                        self._streamed(name, binding, start, text, task_id, events, True)
                        return
            except (requests.RequestException, grpc.RpcError, ValueError, IndexError, KeyError):
                pass
            time.sleep(0.1)
        self._streamed(name, binding, start, text, task_id, events, False)

    def _stream(
        self, binding: str, message_id: str, text: str, task_id: str | None, last: int | None
    ) -> Iterator[tuple[int, str, str, str]]:
        """The events of a new stream (task_id None) or of one resumed after
        event `last`: (event number, kind, task id, state or "")."""
        if binding == "grpc":
            yield from self._grpc_stream(message_id, text, task_id, last)
            return
        if binding == "jsonrpc":
            if task_id is None:
                message = {
                    "role": "user",
                    "messageId": message_id,
                    "parts": [{"kind": "text", "text": text}],
                }
                stream: Stream = Stream(
                    self.url, "message/stream", {"message": message}, version=None
                )
            else:
                stream = Stream(
                    self.url, "tasks/resubscribe", {"id": task_id}, version=None, last_event_id=last
                )
        elif task_id is None:
            message = {"role": "ROLE_USER", "messageId": message_id, "parts": [{"text": text}]}
            stream = RestStream(self.url, "POST", "/message:stream", {"message": message})
        else:
            path = f"/tasks/{task_id}:subscribe"
            stream = RestStream(self.url, "POST", path, last_event_id=last)
        if not stream.is_stream:
            return
        try:
            for event in stream:
                if event.id is None:
                    continue
                if binding == "jsonrpc":
                    result = event.data.get("result")
                    if result is None:
                        continue
                    kind = str(result.get("kind"))
                else:  # a bare StreamResponse: {"task": ...}, {"statusUpdate": ...}
                    field, result = next(iter(event.data.items()))
                    kind = KINDS.get(field, field)
                named = str(result.get("taskId") or result.get("id"))
                yield event.id, kind, named, state_of(result) if "status" in result else ""
        finally:
            stream.close()

    def _grpc_stream(
        self, message_id: str, text: str, task_id: str | None, last: int | None
    ) -> Iterator[tuple[int, str, str, str]]:
        with self._stub() as stub:
            if task_id is None:
                message = a2a_pb2.Message(
                    role=a2a_pb2.Role.ROLE_USER,
                    message_id=message_id,
                    parts=[a2a_pb2.Part(text=text)],
                )
                responses = stub.SendStreamingMessage(
                    a2a_pb2.SendMessageRequest(message=message), metadata=V10_METADATA, timeout=60
                )
            else:
                resume = [
                    *V10_METADATA,
                    *([("last-event-id", str(last))] if last is not None else []),
                ]
                responses = stub.SubscribeToTask(
                    a2a_pb2.SubscribeToTaskRequest(id=task_id), metadata=resume, timeout=60
                )
            for response in responses:
                field = response.WhichOneof("payload")
                if field is None or field == "message":
                    continue
                payload = json_format.MessageToDict(getattr(response, field))
                number = payload.get("metadata", {}).get(EVENT_ID_FIELD)
                if number is None:
                    continue
                named = str(payload.get("taskId") or payload.get("id"))
                state = state_of(payload) if "status" in payload else ""
                yield int(number), KINDS[field], named, state

    def _streamed(
        self,
        name: str,
        binding: str,
        start: float,
        text: str,
        task_id: str | None,
        events: list[tuple[int, str, str]],
        ended: bool,
    ) -> None:
        self.history.record(
            name, "stream", start, ended, text=text, task_id=task_id, events=events, binding=binding
        )
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
                binding=f"{binding}-stream",
            )

    def _walker(self, name: str) -> None:
        rng = random.Random(f"{self._seed}-{name}")
        for n in itertools.count():
            if self.stop.is_set():
                return
            binding = self._bindings[n % len(self._bindings)]
            size = rng.choice((5, 7, 20, 50))
            start = time.monotonic()
            ids: list[str] = []
            token = ""
            try:
                while True:
                    page, token = self._page(binding, size, token)
                    ids += page
                    if not token:
                        break
            except UNANSWERED:
                self.history.record(name, "list", start, False, ids=ids, binding=binding)
                time.sleep(0.2)
                continue
            self.history.record(name, "list", start, True, ids=ids, size=size, binding=binding)
            time.sleep(0.2)

    def _page(self, binding: str, size: int, token: str) -> tuple[list[str], str]:
        """One ListTasks page on `binding`: its task ids, and the next page's token."""
        if binding == "grpc":
            request = a2a_pb2.ListTasksRequest(page_size=size, page_token=token)
            with self._stub() as stub:
                listed = stub.ListTasks(request, metadata=V10_METADATA, timeout=10)
            return [task.id for task in listed.tasks], listed.next_page_token
        params = {"pageSize": size, "pageToken": token}
        if binding == "jsonrpc":
            result = self._rpc("ListTasks", params, V10_HEADERS)["result"]
        else:
            answer = requests.get(
                f"{self.url}/tasks", params=params, headers=V10_HEADERS, timeout=10
            )
            answer.raise_for_status()
            result = answer.json()
        return [task["id"] for task in result["tasks"]], str(result["nextPageToken"])
