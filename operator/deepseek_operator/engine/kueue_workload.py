"""Kueue's Workloads → the serving and role they admit → :class:`WorkloadFacts`, for the status.

With ``spec.queueName`` Kueue makes one Workload per replica: for a LeaderWorkerSet group one
Workload owned by the LeaderWorkerSet, for a Deployment's pod one Workload owned by the pod. The
Workload carries none of our labels, so its owner reference says whose it is: a LeaderWorkerSet
named after the serving (``<serving>`` or ``<serving>-<role>``), or a pod named by its
ReplicaSet (``<deployment>-<pod-template-hash>-<suffix>``) of such a Deployment. Serving names
never end in a role's suffix (admission refuses it), so the name alone tells serving and role.

Only what the Admitted condition and the pair's admission check need is kept (name, role, Kueue's
conditions in a few words, the admission checks' states, two times), as an entry of the one
owner index (:mod:`deepseek_operator.actions.owned`); a change asks for a *status* reconcile of
the serving, as pod events do: admission never rewrites the workload.

Pure: the controller's Workload watch reduces each object with :func:`workload_record`, passing
the reader of API times (``seconds``): it parses them with :mod:`datetime`, which the pure core
does not import, and reads a time without an offset in the process's local zone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from deepseek_operator.api.roles import ROLE_KINDS
from deepseek_operator.engine.kueue import WorkloadFacts
from deepseek_operator.names import LWS_KIND

OwnerKey = tuple[str, str]  # (namespace, DeepSeekServing name)


@dataclass(frozen=True)
class WorkloadRecord:
    """Whose one Workload is, and what the status reads of it."""

    owner: OwnerKey
    facts: WorkloadFacts


def _serving_and_role(workload_name: str) -> tuple[str, str]:
    """The serving and role of our workload (Deployment or LeaderWorkerSet) ``workload_name``."""
    for role in ROLE_KINDS:
        if workload_name.endswith(f"-{role}"):
            return workload_name[: -len(role) - 1], role
    return workload_name, ""


def _owner_workload(ref: Mapping[str, Any]) -> str | None:
    """The name of the Deployment or LeaderWorkerSet behind a Workload's owner reference."""
    name = str(ref.get("name") or "")
    if ref.get("kind") == LWS_KIND:
        return name or None
    if ref.get("kind") == "Pod":
        # <deployment>-<pod-template-hash>-<random suffix>: two segments off the end.
        parts = name.rsplit("-", 2)
        return parts[0] if len(parts) == 3 and all(parts) else None
    return None


def _condition(status: Mapping[str, Any], ctype: str) -> Mapping[str, Any]:
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == ctype:
            return cond
    return {}


def workload_record(
    workload: Mapping[str, Any], seconds: Callable[[Any], float]
) -> WorkloadRecord | None:
    """The record of one Workload; None for one no Deployment or LeaderWorkerSet owns.

    ``seconds``: an API timestamp in seconds since the epoch (0 when absent or unreadable)."""
    meta = workload.get("metadata") or {}
    owned = next(
        (w for ref in meta.get("ownerReferences") or [] if (w := _owner_workload(ref))), None
    )
    if owned is None:
        return None
    serving, role = _serving_and_role(owned)
    status = workload.get("status") or {}
    reserved = _condition(status, "QuotaReserved")
    evicted = _condition(status, "Evicted")
    return WorkloadRecord(
        (str(meta.get("namespace")), serving),
        WorkloadFacts(
            name=str(meta.get("name")),
            role=role,
            admitted=_condition(status, "Admitted").get("status") == "True",
            quota_reserved=reserved.get("status") == "True",
            pending=str(reserved.get("message") or "") if reserved.get("status") == "False" else "",
            evicted=(
                f"{evicted.get('reason', '')}: {evicted.get('message', '')}"
                if evicted.get("status") == "True"
                else ""
            ),
            finished=_condition(status, "Finished").get("status") == "True",
            checks=tuple(
                (str(c.get("name")), str(c.get("state")))
                for c in status.get("admissionChecks") or []
                if isinstance(c, Mapping)
            ),
            created_at=seconds(meta.get("creationTimestamp")),
            reserved_at=(
                seconds(reserved.get("lastTransitionTime"))
                if reserved.get("status") == "True"
                else 0.0
            ),
        ),
    )
