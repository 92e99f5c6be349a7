"""Scored indexes (`shared.indexes`) in the file store's directory: each
index is one small document (`index:<name>`, {member: score}), changed by
compare-and-set like any other (`shared.stores.file.documents`). A change
rewrites the whole index, which suits the few members its features keep
(tasks whose webhooks are still swept)."""

from __future__ import annotations

import math
from typing import Any

from shared.documents import step
from shared.stores.file.documents import FileDocuments


class FileIndexes:
    def __init__(self, documents: FileDocuments) -> None:
        self._documents = documents

    def add(self, name: str, member: str, score: float) -> None:
        def change(index: Any, now: float) -> tuple[Any, None, None]:
            held: dict[str, float] = index if isinstance(index, dict) else {}
            if held.get(member) == score:
                return index, None, None
            return {**held, member: score}, None, None

        step(self._documents, _name(name), change)

    def remove(self, name: str, *members: str) -> None:
        def change(index: Any, now: float) -> tuple[Any, None, None]:
            if not isinstance(index, dict) or not any(m in index for m in members):
                return index, None, None
            return {m: s for m, s in index.items() if m not in members} or None, None, None

        step(self._documents, _name(name), change)

    def range(
        self, name: str, upto: float = math.inf, limit: int | None = None
    ) -> list[tuple[str, float]]:
        index = self._documents.document(_name(name)).value
        held = index.items() if isinstance(index, dict) else ()
        found = sorted((float(score), member) for member, score in held if score <= upto)
        return [(member, score) for score, member in found[:limit]]


def _name(name: str) -> str:
    return f"index:{name}"
