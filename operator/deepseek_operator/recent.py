"""A bounded memory of recent results (:class:`RecentMemory`), one home for every memo.

The node inventory's decisions, the CEL results of admission and the operator's parsed specs
each keep the entries used most recently and drop the least recently used one beyond a limit.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")
_ABSENT = object()


class RecentMemory(Generic[_K, _V]):
    """At most ``limit`` entries, the least recently used one dropped first.

    Safe to share between threads (the conformance harness parses in several); a value is
    computed outside the lock, so two threads may compute the same one once each."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._entries: OrderedDict[_K, _V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: _K) -> _V | None:
        """The value under ``key`` (now the most recently used), or None."""
        with self._lock:
            if key not in self._entries:
                return None
            self._entries.move_to_end(key)
            return self._entries[key]

    def put(self, key: _K, value: _V) -> None:
        """Remember ``value`` under ``key`` as the most recently used entry."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.limit:
                self._entries.popitem(last=False)

    def pop(self, key: _K) -> None:
        """Forget ``key`` (nothing when it is not remembered)."""
        with self._lock:
            self._entries.pop(key, None)

    def remembered(self, key: _K, compute: Callable[[], _V]) -> _V:
        """The value under ``key``, computed by ``compute()`` and remembered when absent (a
        remembered None counts as present)."""
        with self._lock:
            found = self._entries.get(key, _ABSENT)
            if found is not _ABSENT:
                self._entries.move_to_end(key)
                return found  # type: ignore[return-value]
        value = compute()
        self.put(key, value)
        return value
