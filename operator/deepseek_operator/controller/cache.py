"""What the operator keeps of the cluster's objects, from watch events (the cache).

Children of DeepSeekServings (by owner, from the child watches), the StatefulSets
LeaderWorkerSet makes (by LeaderWorkerSet, reduced to what pod refusals need) and our LWS pods
(:mod:`.pod_watch`), each an :class:`OwnedIndex`. What a watch keeps of each object is decided
by the pure reducers of :mod:`deepseek_operator.actions.children`; nothing else is held.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Generic, TypeVar

from deepseek_operator.controller.records import ServingKey
from deepseek_operator.names import (
    LABEL_INSTANCE,
    LWS_NAME_LABEL,
)
from deepseek_operator.plan import ChildKey

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class OwnedIndex(Generic[K, V]):
    """One watch's objects by owner: owner → key → value, and each key's owner, so an entry
    moves or goes whatever its labels say now. Children (by DeepSeekServing), the StatefulSets
    of LeaderWorkerSets (by LeaderWorkerSet) and our LWS pods (by DeepSeekServing) are each one."""

    def __init__(self) -> None:
        self.by_owner: dict[ServingKey, dict[K, V]] = {}
        self._owner: dict[K, ServingKey] = {}  # the reverse index: an event finds its entry

    def __len__(self) -> int:
        return len(self._owner)

    def of(self, owner: ServingKey) -> dict[K, V]:
        """``owner``'s entries (a copy)."""
        return dict(self.by_owner.get(owner) or {})

    def put(self, key: K, owner: ServingKey | None, value: V | None) -> set[ServingKey]:
        """Record ``value`` for ``key`` under ``owner`` (either None: drop it); the owners
        whose entries changed (before and after)."""
        before = self._owner.get(key)
        old = self.by_owner[before][key] if before is not None else None
        if owner is None or value is None:
            owner = value = None
        if before == owner and old == value:
            return set()
        if before is not None:
            entries = self.by_owner[before]
            del entries[key], self._owner[key]
            if not entries:
                del self.by_owner[before]
        if owner is not None and value is not None:
            self.by_owner.setdefault(owner, {})[key] = value
            self._owner[key] = owner
        return {o for o in (before, owner) if o is not None}

    def replace(
        self, within: Callable[[K], bool], listed: Mapping[K, tuple[ServingKey | None, V]]
    ) -> set[ServingKey]:
        """A full listing of the keys ``within`` says it covers; the owners that changed."""
        changed: set[ServingKey] = set()
        for key in [k for k in self._owner if within(k) and k not in listed]:
            changed |= self.put(key, None, None)
        for key, (owner, value) in listed.items():
            changed |= self.put(key, owner, value)
        return changed


def child_owner(namespace: str, body: Mapping[str, Any] | None) -> ServingKey | None:
    """The DeepSeekServing a child belongs to, by our instance label (None: none)."""
    owner = (((body or {}).get("metadata") or {}).get("labels") or {}).get(LABEL_INSTANCE)
    return (namespace, str(owner)) if owner else None


def statefulset_owner(namespace: str, body: Mapping[str, Any] | None) -> ServingKey | None:
    """The LeaderWorkerSet a StatefulSet belongs to, by LWS's name label (None: none)."""
    owner = (((body or {}).get("metadata") or {}).get("labels") or {}).get(LWS_NAME_LABEL)
    return (namespace, str(owner)) if owner else None


def within(namespace: str | None, key: str) -> bool:
    """Whether ``namespace/name`` is in a listing of ``namespace`` (None: every namespace)."""
    return namespace is None or key.partition("/")[0] == namespace


def live_children(entries: Mapping[tuple[str, str], dict[str, Any]]) -> dict[ChildKey, Any]:
    """An owner's children as the reconciler reads them: (kind, name) → body."""
    return {(kind, key.rpartition("/")[2]): body for (kind, key), body in entries.items()}


def keep_out_of_gc() -> None:
    """Exempt every object alive now (modules, the Node index, a listing's children) from the
    cyclic garbage collector's future passes.

    At 10,000 Nodes a full collection walked the whole index with the event loop stopped:
    35-75 ms each, several a second while the heap grew and more while objects were reconciled
    (5-10 ms once the index is frozen). Frozen objects are still freed by reference counting
    when they are dropped."""
    gc.freeze()
