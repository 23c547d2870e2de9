"""The stability rule (docs/design.md): node churn never restarts serving pods.

With the decision already running for this same spec, a node change switches the backend only
when no eligible node is left for it and no replica is serving; a better decision is reported,
not applied. A spec change (new generation) always re-decides.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from deepseek_operator.api.backends import DEEP_GEMM_MEGA_MOE
from deepseek_operator.engine.layout import sequence_parallel
from deepseek_operator.engine.placement import Requirement
from deepseek_operator.engine.resolution import DecisionInputs, Resolution
from deepseek_operator.names import REASON_KEPT_AUTO, REASON_MEGA_MOE_SELECTED


@dataclass(frozen=True)
class PreviousDecision:
    """The backend already running for this same spec (same generation)."""

    moe_backend: str
    reason: str
    serving: bool = False  # some replica of it is ready: changing it would restart live pods


def keep_previous(
    inputs: DecisionInputs, fresh: Resolution, previous: PreviousDecision
) -> Resolution:
    """``fresh`` where the previous backend cannot stay, else the previous one with a note."""
    prev_backend = previous.moe_backend
    was_mega = prev_backend == DEEP_GEMM_MEGA_MOE
    requirement = inputs.requirement(Requirement.MEGA_MOE if was_mega else Requirement.ANY_GPU)
    prev_placement = inputs.place(requirement)
    if not prev_placement.eligible and not previous.serving:
        note = (
            f"the previous decision {prev_backend} has no eligible node left and no replica is "
            f"serving, so the decision changed to {fresh.moe_backend}"
        )
        return replace(fresh, message=fresh.message + "; " + note)
    if not prev_placement.eligible:
        note = (
            f"node changes: no eligible node is left for the running {prev_backend} "
            f"({fresh.reason}: {fresh.message.split(': ', 2)[-1]}); it is kept because replicas "
            "are serving (node churn never restarts serving pods); new pods would stay Pending; "
            "a spec change re-decides"
        )
        reason = previous.reason or fresh.reason
    elif was_mega:
        note = (
            f"node changes: {fresh.reason} now ({fresh.message.split(': ', 1)[-1]}); the running "
            f"deep_gemm_mega_moe is kept because {len(prev_placement.eligible)} eligible node(s) "
            "remain; a spec change re-decides"
        )
        reason = REASON_MEGA_MOE_SELECTED
    else:
        note = (
            f"node changes: deep_gemm_mega_moe has become possible on {len(fresh.eligible_nodes)} "
            "node(s) but is not applied to the running workload (it would restart it); a spec "
            "change re-decides"
        )
        reason = previous.reason or REASON_KEPT_AUTO
    return replace(
        fresh,
        moe_backend=prev_backend,
        reason=reason,
        condition_reason=REASON_MEGA_MOE_SELECTED if was_mega else REASON_KEPT_AUTO,
        message=f"{prev_backend} kept: {note}",
        requirement=requirement,
        placement=prev_placement,
        sequence_parallel=sequence_parallel(inputs.spec, prev_backend),
    )
