"""Children and their owner: whose a child is, whether it still holds what we applied, and what
the stores keep of a child, a StatefulSet, one of our LWS pods or a DeepSeekServing (pure)."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from deepseek_operator.names import (
    KIND,
    KOPF_ANNOTATION_PREFIX,
    LABEL_INSTANCE,
    LABEL_PD_ROLE,
    LWS_GROUP_INDEX_LABEL,
    LWS_NAME_LABEL,
    LWS_WORKER_INDEX_LABEL,
)
from deepseek_operator.plan import ChildKey, PodSeen


def controller_of(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The owner reference with ``controller: true`` of ``body`` (None: it has none)."""
    for ref in (body.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref
    return None


def controlled_by(body: Mapping[str, Any], uid: str) -> bool:
    """Whether ``body``'s controller is the object ``uid`` (the only children we write)."""
    ref = controller_of(body)
    return ref is not None and bool(uid) and ref.get("uid") == uid


def describe_owner(body: Mapping[str, Any]) -> str:
    """``body``'s controller as a user names it: ``LeaderWorkerSet/x``, or ``no owner``."""
    ref = controller_of(body)
    if ref is None:
        return "no owner"
    who = f"{ref.get('kind')}/{ref.get('name')}"
    return f"{who} (uid {ref.get('uid')})" if ref.get("kind") == KIND else who


def foreign_message(kind: str, name: str, owner: str) -> str:
    """Why a child is not written: its name is taken by ``owner``'s object (or no one's)."""
    whose = "has no owner" if owner == "no owner" else f"belongs to {owner}"
    return (
        f"{kind}/{name} already exists and {whose}: it is not this DeepSeekServing's, "
        "and the operator does not write over it (delete or rename that object)"
    )


def contains(live: Any, desired: Any) -> bool:
    """Whether ``live`` holds every field of ``desired`` with the same value (defaults aside)."""
    if isinstance(desired, dict):
        if not isinstance(live, Mapping):
            return False
        return all(k in live and contains(live[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        if not isinstance(live, list) or len(live) != len(desired):
            return False
        return all(contains(a, b) for a, b in zip(live, desired, strict=True))
    return bool(live == desired)


# The key under which a child store's reduced child carries the rest of its body as
# compressed compact JSON (:func:`pack_body`; about 1.5 KB where the parsed tree took tens):
# read only to judge drift.
PACKED_BODY = "packedBody"


def pack_body(body: Mapping[str, Any]) -> bytes:
    """``body`` as :data:`PACKED_BODY` holds it (zlib-compressed compact JSON)."""
    return zlib.compress(json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode(), 1)


def unpack_body(packed: bytes) -> dict[str, Any]:
    """The JSON object :func:`pack_body` packed (a fresh copy each time)."""
    body: dict[str, Any] = json.loads(zlib.decompress(packed))
    return body


def unpacked_body(live: Mapping[str, Any]) -> Mapping[str, Any]:
    """The whole body of a child as the stores keep it (its :data:`PACKED_BODY` unpacked), or
    ``live`` itself when it carries none."""
    packed = live.get(PACKED_BODY)
    if isinstance(packed, bytes):
        return unpack_body(packed)
    return live


def drifted(live: Mapping[str, Any], manifest: Mapping[str, Any]) -> bool:
    """Whether ``live`` no longer holds every field of ``manifest`` (:func:`contains`), reading
    a reduced child's packed body when the store keeps it so."""
    return not contains(unpacked_body(live), manifest)


def split_children(
    live: Mapping[ChildKey, Mapping[str, Any]], uid: str
) -> tuple[dict[ChildKey, Mapping[str, Any]], dict[ChildKey, Mapping[str, Any]]]:
    """(ours, strangers): the watches select children by our labels; only those ``uid``
    controls are its own (read, written, deleted). The rest (a copy of our labels, the children
    of a deleted object of the same name) are never adopted, written over or deleted."""
    ours = {k: v for k, v in live.items() if controlled_by(v, uid)}
    strangers = {k: v for k, v in live.items() if k not in ours}
    return ours, strangers


# Earlier versions let kopf keep its last-handled configuration (a copy of the spec) in this
# annotation; objects they handled still carry it, and the stores drop it.
KOPF_DIFFBASE_ANNOTATION = f"{KOPF_ANNOTATION_PREFIX}/last-handled-configuration"


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


@dataclass(frozen=True)
class PodRecord:
    """What the pod watch keeps of one of our LWS pods (never its body): whose it is, its
    group and worker index, and what ``status.groups`` shows of it (name, node, ready)."""

    owner: tuple[str, str]  # (namespace, DeepSeekServing name)
    group: int
    worker: int
    seen: PodSeen
    role: str = ""  # a disaggregated serving's role ("" for an aggregated serving's pod)


def pod_record(pod: Mapping[str, Any]) -> PodRecord | None:
    """The record of one pod; None for a pod without our owner label or LWS's indexes."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    try:
        group = int(labels[LWS_GROUP_INDEX_LABEL])
        worker = int(labels.get(LWS_WORKER_INDEX_LABEL, "0"))
        owner = str(labels[LABEL_INSTANCE])
    except (KeyError, TypeError, ValueError):
        return None
    conditions = (pod.get("status") or {}).get("conditions") or []
    ready = not meta.get("deletionTimestamp") and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    )
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    return PodRecord(
        (str(meta.get("namespace")), owner),
        group,
        worker,
        PodSeen(str(meta["name"]), node, ready),
        str(labels.get(LABEL_PD_ROLE) or ""),
    )


def pod_groups(records: Iterable[PodRecord]) -> dict[str, dict[int, dict[int, PodSeen]]]:
    """role → group index → worker index → pod, as the planner reads one serving's pods ("" for
    an aggregated serving's; each role's LeaderWorkerSet numbers its groups from 0, so roles
    are kept apart)."""
    out: dict[str, dict[int, dict[int, PodSeen]]] = {}
    for record in sorted(records, key=lambda r: r.role):
        out.setdefault(record.role, {}).setdefault(record.group, {})[record.worker] = record.seen
    return out
