"""What one reconcile does, as data: the actions from the plan and the observed children (pure).

:func:`~deepseek_operator.plan.plan` says what should exist; this module says what to *do* about
what does exist: which children to apply (and whether the API server must be asked first if one
of someone else's is there), which to delete, whether to patch the status, which Events to post
and which follow-up reconcile to schedule. The controller executes the actions in order and
reports each outcome; ``render --from-cluster`` prints them, so a dry run shows deletes too.

A reconcile runs in two rounds, because ``WorkloadApplied`` reports how the writes went:

1. :func:`write_actions`: the status (or, when it is unchanged and something will be written,
   a check that the owner still lives), then the child writes. Consecutive :class:`Apply` and
   :class:`Delete` actions are one batch the executor may run concurrently.
2. :func:`after_write_actions`: ``WorkloadApplied`` and its Events from the writes' outcome,
   then the decision Event.

Nothing here reads the clock or the environment: the caller passes ``now``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deepseek_operator.actions.children import (
    PACKED_BODY,
    contains,
    controlled_by,
    controller_of,
    describe_owner,
    drifted,
    foreign_message,
    pack_body,
    split_children,
    unpacked_body,
)
from deepseek_operator.engine.resolution import Resolution
from deepseek_operator.names import (
    EVENT_BACKEND_RESOLVED,
    EVENT_BACKEND_UNRUNNABLE,
    EVENT_FOREIGN_OBJECT,
    EVENT_INVALID_SPEC,
    EVENT_WORKLOAD_REFUSED,
    LWS_KIND,
    WORKLOAD_APPLIED,
)
from deepseek_operator.plan import ChildKey, Observed, Plan, invalid_spec_plan_status
from deepseek_operator.render.status import with_workload_applied

# Retries after the API server refused a child: 10 s, 20 s, 40 s ... capped at 5 minutes.
BACKOFF_FIRST_S = 10.0
BACKOFF_MAX_S = 300.0
BACKOFF_TRIGGER = "backoff"
"""The trigger of a reconcile run as the back-off's next step (only those lengthen the wait)."""
RECHECK_TRIGGER = "recheck"
CHILD_TRIGGER = "child"
# A child we wrote changed again while our write was on its way: look once the watch settles.
CHILD_DEBOUNCE_S = 0.2
EVENT_MESSAGE_MAX = 1000


@dataclass(frozen=True)
class Apply:
    """Write ``manifest`` (server-side apply). ``unseen``: no object of its name is known, so the
    API server is asked first whether one of someone else's is there."""

    manifest: Mapping[str, Any]
    unseen: bool

    @property
    def child(self) -> ChildKey:
        """(kind, name) of the child."""
        return (str(self.manifest["kind"]), str(self.manifest["metadata"]["name"]))


@dataclass(frozen=True)
class Delete:
    """Delete one of our children that the plan no longer holds."""

    api_version: str
    kind: str
    name: str


@dataclass(frozen=True)
class PatchStatus:
    """Write the DeepSeekServing's status (with a uid precondition: it proves the owner lives)."""

    status: Mapping[str, Any]


@dataclass(frozen=True)
class CheckOwner:
    """Ask the API server whether the owner still lives before writing its children (index
    entries can outlive their object)."""


@dataclass(frozen=True)
class PostEvent:
    """An Event on the DeepSeekServing."""

    type: str  # Normal or Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Decided:
    """The decision changed (counted by the operator's metrics)."""

    moe_backend: str
    reason: str


@dataclass(frozen=True)
class FollowUp:
    """Reconcile again in ``delay`` seconds, named ``trigger``."""

    delay: float
    trigger: str


Action = Apply | Delete | PatchStatus | CheckOwner | PostEvent | Decided | FollowUp


# --- round 1: status and child writes ---------------------------------------------------------


@dataclass(frozen=True)
class Writes:
    """Round 1: the actions, the children found in the way and whether to look again soon."""

    actions: list[Action]
    foreign: list[str]  # ForeignObject messages of children not written
    lws_written: bool  # the LeaderWorkerSet is written: its controller may refuse it silently
    status_only: bool = False  # no child was considered: round 2 cannot tell WorkloadApplied
    # A disaggregated pair: all its children are written or none. The executor asks the API
    # server about every unseen name before it writes any (:func:`pair_held`).
    pair: bool = False

    @property
    def applies(self) -> list[Apply]:
        """The child applies, in order."""
        return [a for a in self.actions if isinstance(a, Apply)]

    @property
    def deletes(self) -> list[Delete]:
        """The child deletions, in order."""
        return [a for a in self.actions if isinstance(a, Delete)]


PAIR_HELD_BY_NAME = (
    "the pair is held: neither role is written until every child name of the pair is free "
    "(half a pair would load weights for nothing)"
)


def pair_held(foreign: Sequence[str]) -> list[str]:
    """The ``ForeignObjectInTheWay`` sentences of a pair that writes no child because of them."""
    return [*foreign, PAIR_HELD_BY_NAME] if foreign else []


def write_actions(
    desired: Sequence[Mapping[str, Any]],
    ours: Mapping[ChildKey, Mapping[str, Any]],
    strangers: Mapping[ChildKey, Mapping[str, Any]],
    status: Mapping[str, Any],
    old_status: Mapping[str, Any],
    *,
    owner_name: str,
    status_only: bool = False,
    pair: bool = False,
) -> Writes:
    """Round 1 for the plan's ``desired`` children and ``status``, given what exists.

    A child is written only when the live object no longer contains the desired one (so a hand
    edit or deletion is restored and a no-op reconcile writes nothing); one of ours the plan no
    longer holds is deleted; a stranger of a desired name is reported, never written. A
    status-only reconcile writes no child. The status goes first: the decision is known before
    any child exists, so users see ``BackendResolved`` without waiting for the workload.

    ``pair``: the children of a disaggregated serving's two roles, written all or none: when a
    name is taken, no child is written or deleted (a prefill pool without its decode pool, or
    the reverse, would load weights for nothing) and the status says which object is in the
    way."""
    writes: list[Action] = []
    foreign: list[str] = []
    lws_written = False
    if not status_only:
        desired_keys = {(str(o["kind"]), str(o["metadata"]["name"])) for o in desired}
        for manifest in desired:
            key = (str(manifest["kind"]), str(manifest["metadata"]["name"]))
            current = ours.get(key)
            if key in strangers:
                foreign.append(foreign_message(key[0], key[1], describe_owner(strangers[key])))
            elif current is None or drifted(current, manifest):
                writes.append(Apply(manifest, unseen=current is None))
                lws_written = lws_written or key == (LWS_KIND, owner_name)
        for (kind, child), child_body in ours.items():  # ours only (strangers stay)
            if (kind, child) not in desired_keys:
                writes.append(Delete(str(child_body.get("apiVersion") or ""), kind, child))
        if pair and foreign:
            writes, foreign, lws_written = [], pair_held(foreign), False
    first: list[Action] = []
    if status != old_status:
        # A merge patch keeps every field it does not name: one the plan no longer holds
        # (status.endpoint once the router is off) goes only when named null.
        dropped = {k: None for k in old_status if k not in status}
        first.append(PatchStatus({**status, **dropped}))
    elif writes:
        first.append(CheckOwner())
    return Writes(first + writes, foreign, lws_written, status_only, pair)


def plan_write_actions(
    planned: Plan,
    ours: Mapping[ChildKey, Mapping[str, Any]],
    strangers: Mapping[ChildKey, Mapping[str, Any]],
    old_status: Mapping[str, Any],
    *,
    owner_name: str,
    status_only: bool = False,
) -> Writes:
    """Round 1 for ``planned``: :func:`write_actions` of its children and status.

    A plan that holds its children (a disaggregated pair one of whose roles cannot run) makes
    the round status-only, so a live pair is neither changed nor deleted."""
    return write_actions(
        planned.objects,
        ours,
        strangers,
        planned.status_dict,
        old_status,
        owner_name=owner_name,
        status_only=status_only or planned.holds_children,
        pair=bool(planned.roles),
    )


# --- round 2: WorkloadApplied and Events ------------------------------------------------------


def _said(status: Mapping[str, Any], ctype: str) -> tuple[Any, ...] | None:
    """What condition ``ctype`` says (status, reason, message), its times aside."""
    for cond in status.get("conditions") or []:
        if cond.get("type") == ctype:
            return (cond.get("status"), cond.get("reason"), cond.get("message"))
    return None


def after_write_actions(
    status: Mapping[str, Any],
    refused: Sequence[str],
    foreign: Sequence[str],
    *,
    generation: int,
    now: str,
    status_only: bool = False,
) -> list[Action]:
    """Round 2, ``WorkloadApplied``: it appears when a child is first refused or in the way (and
    flips to True once every child is written); the normal path costs no extra status write. A
    status-only reconcile wrote nothing, so it cannot tell: the condition stays. Its Events are
    told once per new refusal, not per retry nor per other status change."""
    said = _said(status, WORKLOAD_APPLIED)
    was_blocked = said is not None and str(said[0]) == "False"
    if status_only or not (refused or foreign or was_blocked):
        return []
    updated = with_workload_applied(
        status, list(refused), generation=generation, now=now, foreign=list(foreign)
    )
    actions: list[Action] = []
    if updated != status:
        actions.append(PatchStatus(updated))
    if _said(updated, WORKLOAD_APPLIED) != said:
        if foreign:
            actions.append(PostEvent("Warning", EVENT_FOREIGN_OBJECT, "; ".join(foreign)))
        if refused:
            message = "the API server refused " + "; ".join(refused)
            actions.append(PostEvent("Warning", EVENT_WORKLOAD_REFUSED, message))
    return actions


def decision_actions(observed: Observed, res: Resolution) -> list[Action]:
    """The decision Event (and its count) when the decision differs from the written one."""
    old = observed.status
    old_decision = (
        old.resolved.moe_backend if old and old.resolved else None,
        old.decision.reason if old and old.decision else None,
    )
    if old_decision == (res.moe_backend, res.reason):
        return []
    verb = "Decided" if old_decision == (None, None) else "Changed decision"
    return [
        Decided(res.moe_backend, res.reason),
        PostEvent(
            "Normal" if res.backend_runnable else "Warning",
            EVENT_BACKEND_RESOLVED if res.backend_runnable else EVENT_BACKEND_UNRUNNABLE,
            f"{verb}: --moe-backend {res.moe_backend} ({res.reason}); sequence parallel "
            f"{'on' if res.sequence_parallel else 'off'}; {res.message}",
        ),
    ]


def invalid_spec_actions(
    observed: Observed, message: str, now: str, old_status: Mapping[str, Any]
) -> list[Action]:
    """An invalid spec: its status and one Event, unless the status already says so."""
    status = invalid_spec_plan_status(observed, message, now)
    if status == old_status:
        return []
    return [PatchStatus(status), PostEvent("Warning", EVENT_INVALID_SPEC, message)]


# --- follow-ups -------------------------------------------------------------------------------


def backoff_delay(failures: int) -> float | None:
    """The wait before the next try after ``failures`` consecutive blocked reconciles (the one
    place the formula lives): 10 s, 20 s, 40 s ... capped at 5 minutes; None when none failed."""
    return min(BACKOFF_FIRST_S * 2 ** (failures - 1), BACKOFF_MAX_S) if failures > 0 else None


def next_failures(failures: int, *, blocked: bool, trigger: str) -> int:
    """The consecutive-failure count after a reconcile: it grows per back-off step, not per watch
    event (a LeaderWorkerSet's status updates while its pods start would otherwise push the wait
    to minutes at once), and resets once nothing is blocked."""
    if not blocked:
        return 0
    return failures + 1 if trigger == BACKOFF_TRIGGER or failures == 0 else failures


def follow_ups(
    *, retry_after: float | None, recheck_after: float | None, changed_meanwhile: bool
) -> list[FollowUp]:
    """The reconciles an outcome asks for: the back-off's next step (or else a recheck), and
    another look at children that changed while we wrote them."""
    out: list[FollowUp] = []
    if retry_after is not None:
        out.append(FollowUp(retry_after, BACKOFF_TRIGGER))
    elif recheck_after is not None:
        out.append(FollowUp(recheck_after, RECHECK_TRIGGER))
    if changed_meanwhile:
        out.append(FollowUp(CHILD_DEBOUNCE_S, CHILD_TRIGGER))
    return out


def describe(actions: Iterable[Action]) -> list[str]:
    """One line per action, as ``render --from-cluster`` prints them."""
    lines: list[str] = []
    for action in actions:
        if isinstance(action, Apply):
            kind, name = action.child
            lines.append(f"{'create' if action.unseen else 'apply'} {kind}/{name}")
        elif isinstance(action, Delete):
            lines.append(f"delete {action.kind}/{action.name}")
        elif isinstance(action, PatchStatus):
            lines.append("patch status")
        elif isinstance(action, CheckOwner):
            lines.append("check owner")
        elif isinstance(action, PostEvent):
            lines.append(f"event {action.type} {action.reason}: {action.message}")
        elif isinstance(action, FollowUp):
            lines.append(f"reconcile again in {action.delay:g}s ({action.trigger})")
    return lines


__all__ = [
    "PACKED_BODY",
    "PAIR_HELD_BY_NAME",
    "Action",
    "Apply",
    "CheckOwner",
    "Decided",
    "Delete",
    "FollowUp",
    "PatchStatus",
    "PostEvent",
    "Writes",
    "after_write_actions",
    "backoff_delay",
    "contains",
    "controlled_by",
    "controller_of",
    "decision_actions",
    "describe",
    "describe_owner",
    "drifted",
    "follow_ups",
    "foreign_message",
    "invalid_spec_actions",
    "next_failures",
    "pack_body",
    "pair_held",
    "split_children",
    "unpacked_body",
    "write_actions",
]
