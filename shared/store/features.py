"""The features a store keeps over its small documents and scored indexes
(`shared.documents`, `shared.indexes`), each written once: its push state
and its owners' send limits, for a store that has the two primitives."""

from __future__ import annotations

from collections.abc import Callable

from shared.documents import Documents
from shared.indexes import Indexes
from shared.owners.limiter import DocumentLimiter
from shared.push.contract import Once, PushStore
from shared.push.documents import DocumentPush


class DocumentFeatures:
    """`push_store` and `send_limiter`, for a store with `documents`, `indexes`,
    a `_push` (`Once`) and `_accepted(message_key)` (the task a message
    made, while it is kept)."""

    documents: Documents
    indexes: Indexes
    _push: Once

    def push_store(self, ttl: float | None = None) -> PushStore:
        return self._push.get(
            lambda: DocumentPush(self.documents, self.indexes, ttl, upgrade=self._push_upgrade())
        )

    def send_limiter(self) -> DocumentLimiter:
        return DocumentLimiter(self.documents, self._accepted)

    def _push_upgrade(self) -> Callable[[DocumentPush], object] | None:
        """How push state an earlier version kept its own way is taken over
        (None: it kept none)."""
        return None

    def _accepted(self, message_key: str) -> str | None:
        raise NotImplementedError
