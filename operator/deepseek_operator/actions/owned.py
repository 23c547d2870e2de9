"""What the operator keeps of the cluster's objects that belong to a DeepSeekServing: one
:class:`OwnedIndex`, fed by the controller's watches (pure: no I/O, no clock).

Our children (by our instance label), the StatefulSets LeaderWorkerSet makes (by LWS's name
label), our LWS pods and Kueue's Workloads (by the owner their reducer read) are all entries of
it, keyed by (kind, namespace/name). What a watch keeps of each object is decided by the pure
reducers (:mod:`.children`, :mod:`deepseek_operator.engine.kueue_workload`); nothing else is
held. Each change says which owners it touched: the controller reconciles those.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from deepseek_operator.names import LABEL_INSTANCE, LWS_NAME_LABEL
from deepseek_operator.plan import ChildKey

ServingKey = tuple[str, str]  # (namespace, DeepSeekServing name)
OwnedKey = tuple[str, str]  # (kind, namespace/name)
# Kinds watched but never written: the rest of the index is our children.
STATEFULSET, POD, WORKLOAD = "StatefulSet", "Pod", "Workload"
WATCHED_ONLY = frozenset({STATEFULSET, POD, WORKLOAD})


class OwnedIndex:
    """Every watched object that belongs to a serving: owner → (kind, namespace/name) → what
    its reducer kept, and each key's owner, so an entry moves or goes whatever it says now."""

    def __init__(self) -> None:
        self.by_owner: dict[ServingKey, dict[OwnedKey, Any]] = {}
        self._owner: dict[OwnedKey, ServingKey] = {}  # the reverse index: an event finds its entry

    def __len__(self) -> int:
        return len(self._owner)

    def of_kind(self, owner: ServingKey, kind: str) -> dict[str, Any]:
        """``owner``'s entries of ``kind``: namespace/name → value (a copy)."""
        return {k: v for (c, k), v in (self.by_owner.get(owner) or {}).items() if c == kind}

    def children(self, owner: ServingKey) -> dict[ChildKey, Any]:
        """``owner``'s children as the reconciler reads them: (kind, name) → body."""
        entries = (self.by_owner.get(owner) or {}).items()
        return {(c, k.rpartition("/")[2]): v for (c, k), v in entries if c not in WATCHED_ONLY}

    def owners_with(self, kind: str) -> list[ServingKey]:
        """Every owner with an entry of ``kind``."""
        return [o for o, entries in self.by_owner.items() if any(c == kind for c, _ in entries)]

    def put(self, key: OwnedKey, owner: ServingKey | None, value: Any) -> set[ServingKey]:
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
        self, within: Callable[[OwnedKey], bool], listed: Mapping[OwnedKey, tuple[Any, Any]]
    ) -> set[ServingKey]:
        """A full listing of the keys ``within`` says it covers: key → (owner, value); the
        owners that changed."""
        changed: set[ServingKey] = set()
        for key in [k for k in self._owner if within(k) and k not in listed]:
            changed |= self.put(key, None, None)
        for key, (owner, value) in listed.items():
            changed |= self.put(key, owner, value)
        return changed


def owner_of(kind: str, key: str, value: Any) -> ServingKey | None:
    """Whose the object ``key`` (namespace/name) of ``kind`` is, from what its reducer kept: a
    pod's or Workload's record names its serving, a StatefulSet its LeaderWorkerSet (by LWS's
    name label), a child its serving (by our instance label); None: nobody's."""
    if value is None:
        return None
    if kind in (POD, WORKLOAD):
        return value.owner  # type: ignore[no-any-return]
    labels = (value.get("metadata") or {}).get("labels") or {}
    owner = labels.get(LWS_NAME_LABEL if kind == STATEFULSET else LABEL_INSTANCE)
    return (key.partition("/")[0], str(owner)) if owner else None


def within(namespace: str | None, key: str) -> bool:
    """Whether ``namespace/name`` is in a listing of ``namespace`` (None: every namespace)."""
    return namespace is None or key.partition("/")[0] == namespace
