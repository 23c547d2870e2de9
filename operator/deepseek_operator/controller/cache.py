"""What the operator keeps of the cluster's objects, from watch events (the cache).

Children of DeepSeekServings (by owner, from the child watches) and the StatefulSets
LeaderWorkerSet makes (by LeaderWorkerSet, reduced to what pod refusals need). The reducers
here decide what a watch keeps of each object; nothing else of an object is held.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


class Stores:
    """What the operator knows of DeepSeekServings and their children, kept from watch events.

    ``children``: (namespace, owner) → (kind, name) → the live body (the child watches).
    """

    def __init__(self) -> None:
        self.children: dict[ServingKey, dict[ChildKey, dict[str, Any]]] = {}
        # (namespace, LeaderWorkerSet name) → namespace/name → a StatefulSet it made (reduced)
        self.statefulsets: dict[ServingKey, dict[str, dict[str, Any]]] = {}
        # (kind, namespace/name) → its owner, to move or drop an entry whatever its labels say now
        self._owner_of: dict[tuple[str, str], ServingKey] = {}

    def child_count(self) -> int:
        """How many children are kept (of every owner)."""
        return len(self._owner_of)

    def lws_statefulsets(self, key: ServingKey) -> list[dict[str, Any]]:
        """The StatefulSets of the LeaderWorkerSet named like ``key`` (read, never written)."""
        return list((self.statefulsets.get(key) or {}).values())

    def statefulset_seen(self, key: str, body: dict[str, Any] | None) -> ServingKey | None:
        """Record a LeaderWorkerSet's StatefulSet (``body`` None: deleted); that LWS's key."""
        namespace = key.partition("/")[0]
        owner = ((body or {}).get("metadata") or {}).get("labels", {}).get(LWS_NAME_LABEL)
        for lws, sets in list(self.statefulsets.items()):  # at most one holds it
            if key in sets and (body is None or lws != (namespace, owner)):
                del sets[key]
                if not sets:
                    del self.statefulsets[lws]
                if body is None:
                    return lws
        if body is None or not owner:
            return None
        lws = (namespace, str(owner))
        self.statefulsets.setdefault(lws, {})[key] = body
        return lws

    def statefulsets_listed(self, snapshot: Mapping[str, dict[str, Any]]) -> set[ServingKey]:
        """Replace every StatefulSet with ``snapshot``; the LeaderWorkerSets whose sets changed."""
        before = {
            (lws, key): _rv_text(body)
            for lws, sets in self.statefulsets.items()
            for key, body in sets.items()
        }
        self.statefulsets = {}
        for key, body in snapshot.items():
            self.statefulset_seen(key, body)
        after = {
            (lws, key): _rv_text(body)
            for lws, sets in self.statefulsets.items()
            for key, body in sets.items()
        }
        return {lws for (lws, _key), _rv in set(before.items()) ^ set(after.items())}

    def live_children(self, key: ServingKey) -> dict[ChildKey, dict[str, Any]]:
        """The DeepSeekServing's children as the watches last saw them."""
        return dict(self.children.get(key) or {})

    def child_seen(self, kind: str, key: str, body: dict[str, Any] | None) -> ServingKey | None:
        """Record a child (``body`` None: deleted); its owner (before or after), if any."""
        namespace, _, name = key.partition("/")
        before = self._owner_of.pop((kind, key), None)
        if before is not None:
            entries = self.children.get(before) or {}
            entries.pop((kind, name), None)
            if not entries:
                self.children.pop(before, None)
        owner = _owner(body) if body is not None else None
        if owner is None or body is None:
            return before
        after = (namespace, owner)
        self.children.setdefault(after, {})[(kind, name)] = body
        self._owner_of[(kind, key)] = after
        return after

    def children_listed(self, kind: str, snapshot: Mapping[str, dict[str, Any]]) -> set[ServingKey]:
        """Replace every child of ``kind`` with ``snapshot``; the owners whose children changed."""
        changed: set[ServingKey] = set()
        for child_kind, key in [k for k in self._owner_of if k[0] == kind]:
            if key not in snapshot:
                owner = self.child_seen(child_kind, key, None)
                if owner is not None:
                    changed.add(owner)
        for key, body in snapshot.items():
            owner = self._owner_of.get((kind, key))
            old = (
                (self.children.get(owner) or {}).get((kind, key.partition("/")[2]))
                if owner
                else None
            )
            if old is None or _rv_text(old) != _rv_text(body):
                now = self.child_seen(kind, key, body)
                changed.update(o for o in (owner, now) if o is not None)
        return changed


def _owner(body: Mapping[str, Any]) -> str | None:
    owner = ((body.get("metadata") or {}).get("labels") or {}).get(LABEL_INSTANCE)
    return str(owner) if owner else None


def _rv_text(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("resourceVersion") or "")


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
