"""The decision and rollout Events of a disaggregated serving (pure).

Per role, the decision Event of an aggregated serving (:func:`decision_actions` on the role's
status entry), its message prefixed with the role. And one ``RollingPools`` Event when a spec
change alters a role's pod template: each role's workload carries a hash of its pod template(s)
(``serving.deepseek-operator.io/pod-template-hash``), so the operator can say before it applies
whether the change rolls the prefill pool, the decode pool or both (a change to what the NIXL
hash covers, which lives in the shared spec, rolls both).
"""

from __future__ import annotations

from typing import Any

from deepseek_operator.actions import PostEvent, decision_actions, unpacked_body
from deepseek_operator.api.status import DeepSeekServingStatus
from deepseek_operator.names import ANNOTATION_TEMPLATE_HASH, EVENT_ROLLING, LABEL_PD_ROLE, LWS_KIND
from deepseek_operator.plan import Observed, Plan

Action = Any


def _role_view(observed: Observed, role: str) -> Observed:
    """``observed`` as an aggregated serving's: the role's status entry at the top level."""
    status = observed.status
    entry = next((r for r in (status.roles or ()) if r.role == role), None) if status else None
    if entry is None:
        return Observed(generation=observed.generation)
    view = DeepSeekServingStatus(
        observed_generation=status.observed_generation if status else 0,
        resolved=entry.resolved,
        decision=entry.decision,
    )
    return Observed(generation=observed.generation, status=view)


def _hash(body: Any) -> str | None:
    # The operator's child stores keep most of a body packed (actions/children.py).
    body = unpacked_body(body or {})
    annotations = ((body or {}).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(ANNOTATION_TEMPLATE_HASH)
    return value if isinstance(value, str) else None


def rolling_roles(observed: Observed, planned: Plan) -> list[str]:
    """The roles whose live workload has another pod template than the one to apply."""
    out = []
    for obj in planned.objects:
        if obj.get("kind") not in ("Deployment", LWS_KIND):
            continue
        live = observed.children.get((obj["kind"], obj["metadata"]["name"]))
        old, new = _hash(live), _hash(obj)
        if live is not None and old is not None and old != new:
            role = obj["metadata"]["labels"].get(LABEL_PD_ROLE, "")
            out.append(role)
    return out


def plan_decision_actions(observed: Observed, planned: Plan) -> list[Action]:
    """The decision Events of ``planned`` (per role for a disaggregated serving), and the
    ``RollingPools`` Event when a change rolls one pool or both."""
    if not planned.roles:
        return decision_actions(observed, planned.resolution)
    out: list[Action] = []
    for decided in planned.roles:
        for action in decision_actions(_role_view(observed, decided.role), decided.resolution):
            if isinstance(action, PostEvent):
                action = PostEvent(action.type, action.reason, f"{decided.role}: {action.message}")
            out.append(action)
    rolling = rolling_roles(observed, planned)
    if rolling:
        which = "both pools" if len(rolling) > 1 else f"the {rolling[0]} pool only"
        out.append(
            PostEvent(
                "Normal",
                EVENT_ROLLING,
                f"the spec change alters the pod template of {' and '.join(rolling)}: rolling "
                f"{which}",
            )
        )
    return out
