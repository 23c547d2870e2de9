"""The status of a disaggregated serving: one :class:`RoleStatus` per role, conditions summed up.

Each role's status is the aggregated one (:func:`.status.build_status` on the role's decision);
the top-level BackendResolved, Placeable and Ready hold when they hold for every role, with the
first role that fails giving the reason and every role its part of the message
(``prefill: ...; decode: ...``), so ``kubectl get dss`` and a watcher of the top-level conditions
need not read the roles.
"""

from __future__ import annotations

from collections.abc import Sequence

from deepseek_operator import names as N
from deepseek_operator.api import status as S
from deepseek_operator.render.status import condition

# Between the roles' parts of a summed-up condition message.
ROLES_SEPARATOR = " | "


def role_status(role: str, status: S.DeepSeekServingStatus) -> S.RoleStatus:
    """A role's entry from the aggregated status built for its decision."""
    return S.RoleStatus(
        role=role,
        resolved=status.resolved,
        decision=status.decision,
        replicas=status.replicas,
        ready_replicas=status.ready_replicas,
        capacity=status.capacity,
        groups=status.groups,
        # WorkloadApplied belongs to the whole serving (the reconciler writes both roles at once).
        conditions=[c for c in status.conditions if c.type != N.WORKLOAD_APPLIED],
    )


def _summed(
    ctype: str,
    roles: Sequence[S.RoleStatus],
    ok_reason: str | None,
    *,
    generation: int,
    now: str,
    previous: Sequence[S.Condition],
) -> S.Condition | None:
    parts = [(r.role, c) for r in roles for c in r.conditions if c.type == ctype]
    if not parts:
        return None
    failing = [c for _, c in parts if c.status != "True"]
    if failing:
        reason = failing[0].reason
    else:
        reasons = {c.reason for _, c in parts}
        reason = ok_reason or (reasons.pop() if len(reasons) == 1 else parts[0][1].reason)
    return condition(
        ctype,
        ok=not failing,
        reason=reason,
        message=ROLES_SEPARATOR.join(f"{role}: {c.message}" for role, c in parts),
        generation=generation,
        now=now,
        previous=previous,
    )


def disaggregated_status(
    roles: Sequence[S.RoleStatus],
    *,
    generation: int,
    now: str,
    previous_conditions: Sequence[S.Condition] = (),
) -> S.DeepSeekServingStatus:
    """The whole status of a disaggregated serving from its roles' entries."""
    conditions = []
    for ctype, ok_reason in (
        (N.BACKEND_RESOLVED, N.REASON_ROLES_RESOLVED),
        (N.PLACEABLE, None),
        (N.COMPUTE_DOMAIN, None),
        (N.READY, None),
        (N.ADMITTED, None),
    ):
        summed = _summed(
            ctype,
            roles,
            ok_reason,
            generation=generation,
            now=now,
            previous=previous_conditions,
        )
        if summed is not None:
            conditions.append(summed)
    workload = next((c for c in previous_conditions if c.type == N.WORKLOAD_APPLIED), None)
    if workload is not None:
        conditions.append(workload)
    return S.DeepSeekServingStatus(
        observed_generation=generation,
        replicas=sum(r.replicas for r in roles),
        ready_replicas=sum(r.ready_replicas for r in roles),
        roles=list(roles),
        conditions=conditions,
    )


# Appended to Ready while a pair is held (one role cannot run): what exists, and what will.
HELD_NEW = (
    "nothing is created until both roles can run (half a pair would load weights for nothing)"
)
HELD_LIVE = (
    "the pair is held as it is: its workloads are neither changed nor deleted until both roles "
    "can run"
)


def held_pair(status: S.DeepSeekServingStatus, *, live: bool) -> S.DeepSeekServingStatus:
    """``status`` with the Ready message saying the pair is held: ``live``, its existing children
    keep running unchanged; otherwise none is created."""
    note = HELD_LIVE if live else HELD_NEW
    conditions = [
        c.model_copy(update={"message": f"{c.message}; {note}"}) if c.type == N.READY else c
        for c in status.conditions
    ]
    return status.model_copy(update={"conditions": conditions})
