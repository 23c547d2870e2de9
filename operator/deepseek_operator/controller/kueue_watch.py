"""Kueue's Workloads → the serving and role they admit → :class:`WorkloadFacts`, for the status.

With ``spec.queueName`` Kueue makes one Workload per replica: for a LeaderWorkerSet group one
Workload owned by the LeaderWorkerSet, for a Deployment's pod one Workload owned by the pod. The
Workload carries none of our labels, so its owner reference says whose it is: a LeaderWorkerSet
named after the serving (``<serving>`` or ``<serving>-<role>``), or a pod named by its
ReplicaSet (``<deployment>-<pod-template-hash>-<suffix>``) of such a Deployment. Serving names
never end in a role's suffix (admission refuses it), so the name alone tells serving and role.

Only what the Admitted condition and the pair's admission check need is kept (name, role, Kueue's
conditions in a few words, the admission checks' states);
a change asks for a *status* reconcile of the serving, as pod events do: admission never
rewrites the workload.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deepseek_operator.api.roles import ROLE_KINDS
from deepseek_operator.engine.kueue import WorkloadFacts
from deepseek_operator.names import LWS_KIND

WorkloadKey = tuple[str, str]  # (namespace, Workload name)
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


def workload_record(workload: Mapping[str, Any]) -> WorkloadRecord | None:
    """The record of one Workload; None for one no Deployment or LeaderWorkerSet owns."""
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
            created_at=_seconds(meta.get("creationTimestamp")),
            reserved_at=(
                _seconds(reserved.get("lastTransitionTime"))
                if reserved.get("status") == "True"
                else 0.0
            ),
        ),
    )


def _seconds(timestamp: Any) -> float:
    """An API timestamp (RFC 3339, UTC) in seconds since the epoch; 0 when absent or unreadable."""
    try:
        return dt.datetime.fromisoformat(str(timestamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


class Workloads:
    """Every watched Workload's record, and a serving's as the planner reads them."""

    def __init__(self) -> None:
        self._records: dict[WorkloadKey, WorkloadRecord] = {}
        self._by_owner: dict[OwnerKey, dict[WorkloadKey, WorkloadRecord]] = {}

    def of(self, owner: OwnerKey) -> dict[str, tuple[WorkloadFacts, ...]]:
        """role → the facts of ``owner``'s Workloads of that role ("" for an aggregated one)."""
        out: dict[str, list[WorkloadFacts]] = {}
        for record in self._by_owner.get(owner, {}).values():
            out.setdefault(record.facts.role, []).append(record.facts)
        return {role: tuple(sorted(facts, key=lambda f: f.name)) for role, facts in out.items()}

    def owners(self) -> list[OwnerKey]:
        """Every serving that has a Workload."""
        return list(self._by_owner)

    def observe(self, key: WorkloadKey, record: WorkloadRecord | None) -> set[OwnerKey]:
        """One Workload event (``record`` None: deleted); the owners whose Workloads changed."""
        old = self._records.get(key)
        if old == record:
            return set()
        changed = set()
        if old is not None:
            self._records.pop(key)
            owned = self._by_owner.get(old.owner, {})
            owned.pop(key, None)
            if not owned:
                self._by_owner.pop(old.owner, None)
            changed.add(old.owner)
        if record is not None:
            self._records[key] = record
            self._by_owner.setdefault(record.owner, {})[key] = record
            changed.add(record.owner)
        return changed

    def replace_in(
        self, namespace: str | None, snapshot: dict[WorkloadKey, WorkloadRecord]
    ) -> set[OwnerKey]:
        """A full listing of ``namespace`` (None: every namespace); the owners that changed."""
        changed: set[OwnerKey] = set()
        for key in [k for k in self._records if namespace is None or k[0] == namespace]:
            if key not in snapshot:
                changed |= self.observe(key, None)
        for key, record in snapshot.items():
            changed |= self.observe(key, record)
        return changed

    def __len__(self) -> int:
        return len(self._records)
