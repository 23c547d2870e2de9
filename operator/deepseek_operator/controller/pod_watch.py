"""Our LeaderWorkerSet pods → group index → (pod, node, ready), for the status only.

Why a watch of its own: the status shows, per multi-pod replica, the clique its pods landed in and
how many are ready (``status.groups``), which only the pods know. The watch asks the API server
for our LeaderWorkerSet pods alone (label selector: managed by this operator and carrying LWS's
``name`` label), in each watched namespace or cluster-wide, and keeps of each pod only its name,
node and readiness under (namespace, owner, group index, worker index): never a pod body.

A change of what is kept (a pod scheduled, becoming ready, deleted) asks for a *status* reconcile
of its owner: pod events never rewrite the workload (the stability rule: pods are only restarted by
a spec change or by LWS's own group recreation).

The listing and watching is :class:`~deepseek_operator.kube.list_watch.ListWatch`'s (one paginated LIST, then a WATCH,
in a thread; a 410 or a failed stream lists again); callbacks run on the event loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deepseek_operator.controller.cache import OwnedIndex
from deepseek_operator.names import (
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_PD_ROLE,
    LWS_GROUP_INDEX_LABEL,
    LWS_NAME_LABEL,
    LWS_WORKER_INDEX_LABEL,
    MANAGED_BY,
)
from deepseek_operator.plan import PodSeen

POD_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LWS_NAME_LABEL}"

PodKey = tuple[str, str]  # (namespace, pod name)
OwnerKey = tuple[str, str]  # (namespace, DeepSeekServing name)


@dataclass(frozen=True)
class PodRecord:
    """Where one of our LWS pods belongs and what the status shows of it."""

    owner: OwnerKey
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


class PodGroups(OwnedIndex[PodKey, PodRecord]):
    """Every watched LWS pod's record by owner, and the groups of one owner as the planner
    reads them."""

    def groups(self, owner: OwnerKey, role: str = "") -> dict[int, dict[int, PodSeen]]:
        """group index → worker index → pod, for ``owner`` (its ``role``'s pods when given)."""
        out: dict[int, dict[int, PodSeen]] = {}
        for record in self.by_owner.get(owner, {}).values():
            if record.role == role:
                out.setdefault(record.group, {})[record.worker] = record.seen
        return out

    def by_role(self, owner: OwnerKey) -> dict[str, dict[int, dict[int, PodSeen]]]:
        """role → :meth:`groups` of that role, for ``owner`` ("" for an aggregated serving's
        pods; each role's LeaderWorkerSet numbers its groups from 0, so roles are kept apart)."""
        roles = {r.role for r in self.by_owner.get(owner, {}).values()}
        return {role: self.groups(owner, role) for role in sorted(roles)}

    def observe(self, key: PodKey, record: PodRecord | None) -> set[OwnerKey]:
        """One pod event (``record`` None: deleted); the owners whose groups changed."""
        return self.put(key, record.owner if record else None, record)

    def replace_in(self, namespace: str | None, snapshot: dict[PodKey, PodRecord]) -> set[OwnerKey]:
        """A full listing of ``namespace`` (None: every namespace); the owners that changed."""
        return self.replace(
            lambda key: namespace is None or key[0] == namespace,
            {key: (record.owner, record) for key, record in snapshot.items()},
        )


def pod_key(key: str) -> PodKey:
    """``namespace/name`` (a watch's key) as a pod's (namespace, name)."""
    namespace, _, name = key.partition("/")
    return namespace, name
