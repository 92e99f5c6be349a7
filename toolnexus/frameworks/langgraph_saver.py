"""A LangGraph checkpointer that lives in memory for one run and travels as JSON.

A graph stopped by `interrupt()` goes on only from its checkpoint, and the
answer may be taken by another worker process. `JsonSaver` holds a run's
checkpoints and pending writes in memory, `dump()` turns them into a JSON
value (the bytes the saver's own serializer makes, in base64) that rides in
the task's checkpoint, and `JsonSaver.load()` gives the run of the answer a
saver holding them again.

Imported only by the LangGraph adapter's run function, when LangGraph is
installed and a graph is being run.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)

# The format of `dump()`; `load()` refuses any other.
FORMAT = 1

Typed = tuple[str, bytes]
# (thread id, checkpoint namespace, checkpoint id)
Key = tuple[str, str, str]


class _Stored:
    """One checkpoint as the serializer wrote it, with its parent's id."""

    __slots__ = ("checkpoint", "metadata", "parent")

    def __init__(self, checkpoint: Typed, metadata: Typed, parent: str | None) -> None:
        self.checkpoint = checkpoint
        self.metadata = metadata
        self.parent = parent


# One pending write: task id, channel, value, task path.
_Write = tuple[str, str, Typed, str]


def _encoded(typed: Typed) -> list[str]:
    return [typed[0], base64.b64encode(typed[1]).decode("ascii")]


def _decoded(value: Any) -> Typed:
    kind, data = value
    return str(kind), base64.b64decode(data)


class JsonSaver(BaseCheckpointSaver[int]):
    """Checkpoints kept in memory, dumped to JSON and loaded back.

    Checkpoints are stored whole (their channel values included), so a dump
    that keeps only the latest checkpoint of each namespace still resumes a
    graph; `dump(latest_only=False)` keeps the whole history, which a graph
    with delta channels (rebuilt from the writes of earlier steps) needs.
    """

    def __init__(self) -> None:
        super().__init__()
        self._checkpoints: dict[Key, _Stored] = {}
        self._writes: dict[Key, dict[tuple[str, int], _Write]] = {}

    # -- JSON ---------------------------------------------------------------

    def dump(self, *, latest_only: bool = True) -> dict[str, Any]:
        """The saver's contents as a JSON value."""
        keys = sorted(self._checkpoints)
        if latest_only:
            latest: dict[tuple[str, str], Key] = {}
            for key in keys:  # sorted: a later id of the same namespace wins
                latest[key[:2]] = key
            keys = sorted(latest.values())
        checkpoints = []
        writes = []
        for key in keys:
            stored = self._checkpoints[key]
            checkpoints.append(
                {
                    "thread": key[0],
                    "ns": key[1],
                    "id": key[2],
                    "parent": stored.parent,
                    "checkpoint": _encoded(stored.checkpoint),
                    "metadata": _encoded(stored.metadata),
                }
            )
            for (task_id, index), (_, channel, value, path) in self._writes.get(key, {}).items():
                writes.append(
                    {
                        "thread": key[0],
                        "ns": key[1],
                        "id": key[2],
                        "task": task_id,
                        "index": index,
                        "channel": channel,
                        "value": _encoded(value),
                        "path": path,
                    }
                )
        return {"format": FORMAT, "checkpoints": checkpoints, "writes": writes}

    @classmethod
    def load(cls, dumped: Any) -> JsonSaver:
        """A saver holding what `dump()` gave."""
        if not isinstance(dumped, dict) or dumped.get("format") != FORMAT:
            raise ValueError("not a LangGraph checkpoint this adapter wrote")
        saver = cls()
        for item in dumped["checkpoints"]:
            key = (item["thread"], item["ns"], item["id"])
            saver._checkpoints[key] = _Stored(
                _decoded(item["checkpoint"]), _decoded(item["metadata"]), item["parent"]
            )
        for item in dumped["writes"]:
            key = (item["thread"], item["ns"], item["id"])
            saver._writes.setdefault(key, {})[(item["task"], int(item["index"]))] = (
                item["task"],
                item["channel"],
                _decoded(item["value"]),
                item["path"],
            )
        return saver

    # -- the checkpointer contract -----------------------------------------

    def _tuple(self, key: Key) -> CheckpointTuple:
        stored = self._checkpoints[key]
        thread, ns, checkpoint_id = key
        found = self._writes.get(key, {})
        ordered = sorted(found, key=lambda k: writes_sort_key(found[k][3], *k))
        parent: RunnableConfig | None = None
        if stored.parent:
            parent = {
                "configurable": {
                    "thread_id": thread,
                    "checkpoint_ns": ns,
                    "checkpoint_id": stored.parent,
                }
            }
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                }
            },
            checkpoint=self.serde.loads_typed(stored.checkpoint),
            metadata=self.serde.loads_typed(stored.metadata),
            parent_config=parent,
            pending_writes=[
                (found[k][0], found[k][1], self.serde.loads_typed(found[k][2])) for k in ordered
            ],
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config["configurable"]
        thread, ns = str(configurable["thread_id"]), str(configurable.get("checkpoint_ns", ""))
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id:
            key = (thread, ns, checkpoint_id)
            return self._tuple(key) if key in self._checkpoints else None
        ids = [key[2] for key in self._checkpoints if key[:2] == (thread, ns)]
        return self._tuple((thread, ns, max(ids))) if ids else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        configurable = (config or {}).get("configurable", {})
        thread = configurable.get("thread_id")
        ns = configurable.get("checkpoint_ns")
        wanted_id = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        count = 0
        for key in sorted(self._checkpoints, key=lambda k: k[2], reverse=True):
            if thread is not None and key[0] != thread:
                continue
            if ns is not None and key[1] != ns:
                continue
            if wanted_id and key[2] != wanted_id:
                continue
            if before_id and key[2] >= before_id:
                continue
            found = self._tuple(key)
            if filter and any(found.metadata.get(k) != v for k, v in filter.items()):
                continue
            if limit is not None and count >= limit:
                return
            count += 1
            yield found

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        configurable = config["configurable"]
        thread, ns = str(configurable["thread_id"]), str(configurable.get("checkpoint_ns", ""))
        self._checkpoints[(thread, ns, checkpoint["id"])] = _Stored(
            self.serde.dumps_typed(checkpoint),
            self.serde.dumps_typed(get_checkpoint_metadata(config, metadata)),
            configurable.get("checkpoint_id"),
        )
        return {
            "configurable": {
                "thread_id": thread,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        configurable = config["configurable"]
        key = (
            str(configurable["thread_id"]),
            str(configurable.get("checkpoint_ns", "")),
            str(configurable["checkpoint_id"]),
        )
        stored = self._writes.setdefault(key, {})
        for index, (channel, value) in enumerate(writes):
            inner = (task_id, WRITES_IDX_MAP.get(channel, index))
            # A task's regular writes are saved once; its special ones
            # (an error, an interrupt) are replaced by the latest.
            if inner[1] >= 0 and inner in stored:
                continue
            stored[inner] = (task_id, channel, self.serde.dumps_typed(value), task_path)

    def delete_thread(self, thread_id: str) -> None:
        for key in [key for key in self._checkpoints if key[0] == thread_id]:
            del self._checkpoints[key]
        for key in [key for key in self._writes if key[0] == thread_id]:
            del self._writes[key]

    # The async methods: everything is in memory, nothing to wait for.

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for found in self.list(config, filter=filter, before=before, limit=limit):
            yield found

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)
