"""How many replicas the workload asks for: what can be placed, plus what the user lets queue.

A replica that no eligible node can hold would only be a Pending pod (or a Pending LeaderWorkerSet
group), and thousands of them are thousands of objects for the API server and the scheduler. So
the workload asks for at most the replicas the eligible nodes hold plus
``spec.maxPendingReplicas`` (default 1: one Pending pod is what a cluster autoscaler reacts to).
The stability rule (docs/design.md) bounds it from below: node churn never scales serving pods
down, so the workload keeps the size it already has unless the user lowers ``spec.replicas``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkloadSize:
    """The workload's replica count and why it differs from ``spec.replicas``."""

    wanted: int  # spec.replicas
    placeable: int  # replicas the eligible nodes hold
    max_pending: int  # spec.maxPendingReplicas
    applied: int | None  # the live workload's replicas (None: not applied, or offline)
    replicas: int  # what the workload asks for

    @property
    def held_back(self) -> int:
        """Replicas of ``spec.replicas`` the workload does not ask for."""
        return self.wanted - self.replicas

    def note(self) -> str:
        """'; N of M replicas held back: …' for the Placeable message, or '' when none is."""
        if not self.held_back:
            return ""
        queue = (
            f"{self.placeable} placeable + spec.maxPendingReplicas {self.max_pending} "
            "allowed to pend"
        )
        if (
            self.applied is not None
            and self.replicas == self.applied
            and (self.applied > self.placeable + self.max_pending)
        ):
            why = (
                f"the workload keeps its current {self.replicas} ({queue} would be fewer, but "
                "lost capacity never scales serving pods down)"
            )
        else:
            why = f"the workload asks for {self.replicas} ({queue})"
        return f"; {self.held_back} of {self.wanted} replicas held back: {why}"


def workload_size(
    wanted: int, placeable: int, max_pending: int, applied: int | None
) -> WorkloadSize:
    """The replicas to render: ``min(wanted, placeable + max_pending)``, never below what is
    applied unless ``wanted`` (the user) is lower."""
    replicas = min(wanted, placeable + max_pending)
    if applied is not None:
        replicas = max(replicas, min(applied, wanted))
    return WorkloadSize(wanted, placeable, max_pending, applied, replicas)
