"""What the cluster shows for one DeepSeekServing, as :func:`~deepseek_operator.plan.plan` reads it.

:class:`Observed` holds the live object's status (parsed once), its children and the pods and
Kueue Workloads the reconciler gathered; its methods answer the plan's questions of them (the
decision running for this generation, the conditions to carry over, why no pod can be created,
the replicas applied and ready). Pure: the reconciler fills it, :meth:`Observed.offline` is the
``render`` command's empty view.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from deepseek_operator.api.load import ServingObject
from deepseek_operator.api.status import (
    Condition,
    Decision,
    DeepSeekServingStatus,
    Resolved,
    RoleStatus,
    WeightsStatus,
)
from deepseek_operator.engine.kueue import WorkloadFacts
from deepseek_operator.engine.resolution import Resolution
from deepseek_operator.engine.stability import PreviousDecision
from deepseek_operator.names import LWS_KIND, WORKLOAD_APPLIED

ChildKey = tuple[str, str]
"""(kind, name) of a child object."""


@dataclass(frozen=True)
class PodSeen:
    """What the operator keeps of one pod of a LeaderWorkerSet group (never the pod body)."""

    name: str
    node: str  # spec.nodeName; "" while unscheduled
    ready: bool


GroupPods = Mapping[int, PodSeen]
"""The pods of one group by LeaderWorkerSet worker index (0: the leader)."""

RoleWorkloads = Mapping[str, tuple[WorkloadFacts, ...]]
"""Kueue's Workloads of a serving by role ("" for an aggregated serving): spec.queueName only."""


@dataclass(frozen=True)
class Observed:
    """What the cluster shows for one DeepSeekServing: its status (parsed once) and its children."""

    generation: int = 0  # metadata.generation of the live object
    status: DeepSeekServingStatus | None = None
    raw_status: Mapping[str, Any] = field(default_factory=dict)  # as read, to skip no-op writes
    children: Mapping[ChildKey, Mapping[str, Any]] = field(default_factory=dict)
    live: bool = True  # False for the offline preview, where no pods can have been seen
    # Why a LeaderWorkerSet's StatefulSets cannot create pods, in their controller's words
    # ("StatefulSet/<name>: FailedCreate: <message>"): read by the reconciler from the Events of
    # StatefulSets that miss pods (the LeaderWorkerSet's own status never says).
    pod_refusals: tuple[str, ...] = ()
    # Multi-pod replicas: the pods of each LeaderWorkerSet group, by group index.
    groups: Mapping[int, GroupPods] = field(default_factory=dict)
    # A disaggregated serving's: each role's groups (its LeaderWorkerSet's), by role.
    role_groups: Mapping[str, Mapping[int, GroupPods]] = field(default_factory=dict)
    # With spec.queueName: Kueue's Workloads of the serving's workloads, by role ("" for an
    # aggregated serving); they decide the Admitted condition.
    workloads: RoleWorkloads = field(default_factory=dict)

    @classmethod
    def offline(cls) -> Observed:
        """Nothing observed: the ``render`` command's view."""
        return cls(live=False)

    @classmethod
    def from_body(
        cls,
        body: Mapping[str, Any],
        children: Mapping[ChildKey, Mapping[str, Any]],
        pod_refusals: tuple[str, ...] = (),
        groups: Mapping[str, Mapping[int, GroupPods]] | None = None,
        workloads: RoleWorkloads | None = None,
    ) -> Observed:
        """Parse the live object's status through the API model, once. ``groups``: the pods of
        each LeaderWorkerSet group by role ("" for an aggregated serving); ``workloads``:
        Kueue's Workloads of the serving by role."""
        raw = body.get("status") or {}
        try:
            status = DeepSeekServingStatus.model_validate(raw) if raw else None
        except ValidationError:
            # Not a status this operator wrote (the structural schema prunes foreign fields):
            # decide afresh rather than trust it.
            status = None
        generation = int((body.get("metadata") or {}).get("generation") or 0)
        return cls(
            generation=generation,
            status=status,
            raw_status=raw,
            children=children,
            pod_refusals=pod_refusals,
            groups=(groups or {}).get("", {}),
            role_groups={role: g for role, g in (groups or {}).items() if role},
            workloads=workloads or {},
        )

    @property
    def weights(self) -> WeightsStatus | None:
        """The fill's progress last written (its ETA measures the rate from it)."""
        return self.status.weights if self.status else None

    @property
    def conditions(self) -> tuple[Condition, ...]:
        """The conditions last written (their transition times carry over)."""
        return tuple(self.status.conditions) if self.status else ()

    def previous_decision(self) -> PreviousDecision | None:
        """The decision running for THIS generation (None after a spec change or on first sight)."""
        status = self.status
        if status is None:
            return None
        return self._running(status.resolved, status.decision, status.ready_replicas)

    def role_previous_decision(self, kind: str) -> PreviousDecision | None:
        """The decision running for role ``kind`` of THIS generation (as :meth:`previous_decision`)."""
        role = self._role_status(kind)
        if role is None:
            return None
        return self._running(role.resolved, role.decision, role.ready_replicas)

    def _running(
        self, resolved: Resolved | None, decision: Decision | None, ready_replicas: int
    ) -> PreviousDecision | None:
        """The serving's or a role's last decision, if it was made for THIS generation."""
        if resolved is None or not resolved.moe_backend:
            return None
        if self.status is None or self.status.observed_generation != self.generation:
            return None
        return PreviousDecision(
            resolved.moe_backend, decision.reason if decision else "", serving=ready_replicas > 0
        )

    def workload_conditions(self, role: str) -> tuple[Condition, ...]:
        """The conditions last written for one workload: the serving's (``role`` ""), or a
        role's (:meth:`role_conditions`)."""
        return self.role_conditions(role) if role else self.conditions

    def workload_groups(self, role: str) -> Mapping[int, GroupPods]:
        """The pods of one workload's LeaderWorkerSet groups: the serving's (``role`` ""), or a
        role's."""
        return self.role_groups.get(role, {}) if role else self.groups

    def role_conditions(self, kind: str) -> tuple[Condition, ...]:
        """The conditions last written for role ``kind`` (and the serving's WorkloadApplied)."""
        role = self._role_status(kind)
        own = tuple(role.conditions) if role else ()
        return own + tuple(c for c in self.conditions if c.type == WORKLOAD_APPLIED)

    def _role_status(self, kind: str) -> RoleStatus | None:
        roles = self.status.roles if self.status else None
        return next((r for r in roles or () if r.role == kind), None)

    def pod_refusal(self) -> str | None:
        """Why a child's controller cannot create pods, in its own words (or None).

        A Deployment reports it as the ``ReplicaFailure`` condition (reason ``FailedCreate``,
        e.g. a Pod Security admission refusal) that it copies from its ReplicaSet; a
        LeaderWorkerSet's StatefulSets only as ``FailedCreate`` Events (:attr:`pod_refusals`).
        """
        for (kind, name), body in sorted(self.children.items()):
            for cond in (body.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
                    return f"{kind}/{name}: {cond.get('reason', '')}: {cond.get('message', '')}"
        return self.pod_refusals[0] if self.pod_refusals else None

    def applied_replicas(self, res: Resolution, serving: ServingObject) -> int | None:
        """The replicas the live workload (Deployment or LeaderWorkerSet) asks for, or None."""
        kind = "Deployment" if res.pods_per_replica == 1 else LWS_KIND
        child = self.children.get((kind, serving.name))
        if child is None:
            return None
        replicas = (child.get("spec") or {}).get("replicas")
        return replicas if isinstance(replicas, int) else None

    def ready_replicas(self, res: Resolution, serving: ServingObject) -> int:
        """Replicas whose pods are all ready, from the live children's status.

        Single-pod replicas: the Deployment's ready pods. Multi-pod replicas: the
        LeaderWorkerSet's ready groups (LWS counts a group ready when all its pods are).
        """
        kind = "Deployment" if res.pods_per_replica == 1 else LWS_KIND
        child = self.children.get((kind, serving.name)) or {}
        return int((child.get("status") or {}).get("readyReplicas") or 0)
