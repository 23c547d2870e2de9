"""What the operator keeps of the cluster's objects, from watch events (the cache).

Children of DeepSeekServings (by owner, from the child watches), the StatefulSets
LeaderWorkerSet makes (by LeaderWorkerSet, reduced to what pod refusals need) and our LWS pods
(:mod:`.pod_watch`), each an :class:`OwnedIndex`. The reducers here decide what a watch keeps of
each object; nothing else of an object is held.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any, Generic, TypeVar

from deepseek_operator.actions import PACKED_BODY, pack_body
from deepseek_operator.controller.records import ServingKey
from deepseek_operator.names import (
    KOPF_ANNOTATION_PREFIX,
    LABEL_INSTANCE,
    LWS_NAME_LABEL,
)
from deepseek_operator.plan import ChildKey

# Earlier versions let kopf keep its last-handled configuration (a copy of the spec) in this
# annotation; objects they handled still carry it, and the stores drop it.
KOPF_DIFFBASE_ANNOTATION = f"{KOPF_ANNOTATION_PREFIX}/last-handled-configuration"


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


def reduced_statefulset(body: Mapping[str, Any]) -> dict[str, Any]:
    """A LeaderWorkerSet's StatefulSet, reduced to what pod refusals need."""
    meta = body.get("metadata") or {}
    kept_meta = {
        k: meta.get(k) for k in ("name", "namespace", "uid", "generation", "resourceVersion")
    }
    kept_meta["labels"] = {LWS_NAME_LABEL: (meta.get("labels") or {}).get(LWS_NAME_LABEL)}
    return {
        "metadata": kept_meta,
        "spec": {"replicas": (body.get("spec") or {}).get("replicas")},
        "status": dict(body.get("status") or {}),
    }


def kept(body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` as the stores keep it: without ``metadata.managedFields``, which nothing here
    reads and which, for server-side-applied objects, is about as large as the object itself
    (1,000 DeepSeekServings: their Deployments, Services and bodies held twice over), and
    without kopf's last-handled configuration (a second copy of a DeepSeekServing's spec)."""
    kept = dict(body)
    meta = kept.get("metadata")
    if isinstance(meta, Mapping):
        annotations = meta.get("annotations") or {}
        if "managedFields" in meta or KOPF_DIFFBASE_ANNOTATION in annotations:
            meta = {k: v for k, v in meta.items() if k != "managedFields"}
            if KOPF_DIFFBASE_ANNOTATION in annotations:
                meta["annotations"] = {
                    k: v for k, v in annotations.items() if k != KOPF_DIFFBASE_ANNOTATION
                }
            kept["metadata"] = meta
    return kept


_CHILD_META = ("name", "namespace", "uid", "resourceVersion", "generation", "labels")


def reduced_child(body: Mapping[str, Any]) -> dict[str, Any]:
    """A child as the stores keep it: what the reconciler reads as parsed fields (identity,
    owner, labels, the spec fields the status reads: replicas and the LeaderWorkerSet group
    size, the status), and the rest of the body (never managedFields) as compressed JSON bytes,
    read only to judge whether it still holds what we apply (:func:`~.actions.drifted`)."""
    meta = body.get("metadata") or {}
    kept_meta = {k: meta[k] for k in _CHILD_META if k in meta}
    if meta.get("ownerReferences"):
        kept_meta["ownerReferences"] = meta["ownerReferences"]
    spec = body.get("spec") or {}
    kept_spec: dict[str, Any] = {}
    if "replicas" in spec:
        kept_spec["replicas"] = spec["replicas"]
    size = (spec.get("leaderWorkerTemplate") or {}).get("size")
    if size is not None:
        kept_spec["leaderWorkerTemplate"] = {"size": size}
    rest = {k: v for k, v in kept(body).items() if k != "status"}
    out: dict[str, Any] = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": kept_meta,
        "spec": kept_spec,
        PACKED_BODY: pack_body(rest),
    }
    if "status" in body:
        out["status"] = body["status"]
    return out


def involved_object(body: Mapping[str, Any]) -> dict[str, Any]:
    """What an Event names of the DeepSeekServing ``body``: its kind and identity."""
    meta = body.get("metadata") or {}
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid") if k in meta},
    }
