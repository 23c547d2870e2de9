"""What a LeaderWorkerSet and its StatefulSets say of what their controllers could not create
(pure: the controller's :mod:`~deepseek_operator.controller.pod_refusals` reads the Events).

A LeaderWorkerSet's leader StatefulSet is named after it, each multi-pod group's worker
StatefulSet after its leader pod (``<name>-<group>``); their controllers report a refused pod or
StatefulSet only as a ``FailedCreate`` Event, in the words matched here (LWS v0.9.0).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any


def missing_pods(statefulset: Mapping[str, Any]) -> int:
    """Pods the StatefulSet wants but has not created (0 while its status lags a new spec)."""
    meta = statefulset.get("metadata") or {}
    status = statefulset.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        return 0
    wanted = (statefulset.get("spec") or {}).get("replicas")
    wanted = 1 if wanted is None else int(wanted)
    return max(0, wanted - int(status.get("replicas") or 0))


# What the LeaderWorkerSet controller's FailedCreate Events say it failed to create (LWS v0.9.0):
# the leader StatefulSet (named after the LeaderWorkerSet) or a group's worker StatefulSet (named
# after its leader pod).
_LEADER_FAILED = re.compile(r"^Failed to create leader statefulset (\S+): ")
_WORKER_FAILED = re.compile(r"^Failed to create worker statefulset for leader pod (\S+): ")


def absent_statefulsets(
    leaderworkerset: Mapping[str, Any], statefulsets: Iterable[Mapping[str, Any]]
) -> set[str]:
    """The StatefulSets the LeaderWorkerSet controller should have made but that do not exist:
    its leader StatefulSet, and (groups of more than one pod) a worker StatefulSet per leader pod
    the leader StatefulSet has created (``<name>-<group>``)."""
    name = str((leaderworkerset.get("metadata") or {}).get("name") or "")
    present = {
        str((s.get("metadata") or {}).get("name")): s for s in statefulsets if s.get("metadata")
    }
    leader = present.get(name)
    if leader is None:
        return {name} if name else set()
    template = (leaderworkerset.get("spec") or {}).get("leaderWorkerTemplate") or {}
    if int(template.get("size") or 1) <= 1:
        return set()
    leaders = int((leader.get("status") or {}).get("replicas") or 0)
    return {f"{name}-{group}" for group in range(leaders)} - set(present)


def failed_target(message: str) -> str | None:
    """The StatefulSet a LeaderWorkerSet FailedCreate message is about (None: something else)."""
    for pattern in (_LEADER_FAILED, _WORKER_FAILED):
        if match := pattern.match(message):
            return match.group(1)
    return None
