"""One record per DeepSeekServing: everything the operator remembers about that object.

The latest body (from kopf's events), the (uid, generation) last reconciled for a spec, the
reconcile lock, the read-your-writes caches (the status we last wrote, apply responses the watch
has not delivered yet, applies on their way), the parsed spec and the back-off count all live on
one :class:`ServingRecord`, so forgetting a deleted object is one ``pop`` and a test can count
what is left. (What the *cluster* holds, children and pods, is mirrored by the watches' stores
and leaves with the objects themselves; a pending reconcile lives in the queue until it runs.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from deepseek_operator.api.load import ServingObject
from deepseek_operator.plan import ChildKey

ServingKey = tuple[str, str]  # (namespace, name)


@dataclass(slots=True, eq=False)
class ServingRecord:
    """What the operator remembers about one DeepSeekServing."""

    # The latest body kopf delivered (None: only the reconciler knows the object so far).
    body: Mapping[str, Any] | None = None
    # (uid, generation) last reconciled for a spec: an event with the same pair (a status echo,
    # a label edit) needs no reconcile.
    handled: tuple[str, int] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # The last status we wrote with its resourceVersion, until the watch delivers it.
    written: tuple[int, dict[str, Any]] | None = None
    # (kind, name) -> our last apply response, until the child watch delivers that version.
    applied: dict[ChildKey, Mapping[str, Any]] = field(default_factory=dict)
    # (kind, name) -> the newest resourceVersion the child watch delivered while our apply of
    # that child was on its way (0: none yet).
    in_flight: dict[ChildKey, int] = field(default_factory=dict)
    # (uid, generation, the parsed object): the spec cannot change without a new generation.
    parsed: tuple[str, int, ServingObject] | None = None
    failures: int = 0  # consecutive blocked reconciles (the back-off's step)

    def reconciler_state_dropped(self) -> ServingRecord:
        """A record that keeps only what kopf told (body, handled): a replaced object's caches
        must never leak into its successor's reconciles."""
        return ServingRecord(body=self.body, handled=self.handled)


class Records:
    """Every :class:`ServingRecord`, by (namespace, name)."""

    def __init__(self) -> None:
        self._by_key: dict[ServingKey, ServingRecord] = {}

    def get(self, key: ServingKey) -> ServingRecord | None:
        """The record of ``key`` (None: nothing remembered)."""
        return self._by_key.get(key)

    def ensure(self, key: ServingKey) -> ServingRecord:
        """The record of ``key``, made empty if there is none."""
        rec = self._by_key.get(key)
        if rec is None:
            rec = self._by_key[key] = ServingRecord()
        return rec

    def forget(self, key: ServingKey) -> None:
        """Drop all the operator remembers about ``key``."""
        self._by_key.pop(key, None)

    def replace(self, key: ServingKey, rec: ServingRecord) -> None:
        """Put ``rec`` in place of ``key``'s record."""
        self._by_key[key] = rec

    def bodies(self) -> Iterator[tuple[ServingKey, Mapping[str, Any]]]:
        """(key, latest body) of every object kopf has told about (a snapshot)."""
        return iter([(k, r.body) for k, r in self._by_key.items() if r.body is not None])

    def items(self) -> list[tuple[ServingKey, ServingRecord]]:
        """Every (key, record) (a snapshot)."""
        return list(self._by_key.items())

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key
