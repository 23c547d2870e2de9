"""Kueue admission of a serving's workloads: what ``spec.queueName`` means here (pure).

With ``spec.queueName`` set, every engine workload (the Deployment or LeaderWorkerSet of the
serving, of each role of a disaggregated one) carries Kueue's ``kueue.x-k8s.io/queue-name`` label.
Kueue then turns each replica into a Workload (one per single-pod replica, one per LeaderWorkerSet
group with the leader and the workers as its pod sets) and keeps its pods behind a scheduling gate
until the ClusterQueue behind that LocalQueue has quota for all of it. Without Kueue the label is
inert: nothing waits. docs/kueue.md tells the whole story.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deepseek_operator import names as N
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.names import KUEUE_API_VERSION, KUEUE_INSTALL_HINT, KUEUE_QUEUE_LABEL


def queue_note(spec: DeepSeekServingSpec, served: bool | None) -> str | None:
    """The ``render`` command's info line about ``spec.queueName`` (None when it is unset).

    ``served``: whether the cluster serves Kueue's Workload API (None: offline, not known).
    """
    name = spec.queue_name
    if not name:
        return None
    label = f"{KUEUE_QUEUE_LABEL}={name}"
    if served is None:
        return (
            f"spec.queueName {name!r} needs Kueue: the engine workloads carry {label}, which "
            "only a cluster running Kueue acts on (each replica then starts once LocalQueue "
            f"{name!r} admits it whole); without Kueue they start as if no queue were named"
        )
    if served:
        return (
            f"spec.queueName {name!r}: this cluster runs Kueue; each replica waits until "
            f"LocalQueue {name!r} admits it whole under its ClusterQueue's quota"
        )
    return (
        f"spec.queueName {name!r} needs Kueue, which this cluster does not serve (no "
        f"{KUEUE_API_VERSION}): the label {label} has no effect; {KUEUE_INSTALL_HINT}"
    )


@dataclass(frozen=True)
class WorkloadFacts:
    """What the operator keeps of one Kueue Workload of a serving (one replica, or one
    LeaderWorkerSet group): the controller reads them from Kueue's Workload objects."""

    name: str
    role: str = ""  # the disaggregated role whose workload owns it ("" for an aggregated one)
    admitted: bool = False  # condition Admitted=True
    quota_reserved: bool = False  # condition QuotaReserved=True
    pending: str = ""  # Kueue's QuotaReserved=False message: why it waits
    evicted: str = ""  # "<reason>: <message>" of Evicted=True (preempted, quota shrank, ...)
    finished: bool = False  # condition Finished=True (its pods ended; not counted)
    checks: tuple[tuple[str, str], ...] = ()  # status.admissionChecks: (name, state)
    created_at: float = 0.0  # metadata.creationTimestamp, seconds since the epoch
    reserved_at: float = 0.0  # when QuotaReserved turned True (0: not reserved)


CheckRecord = tuple[str, bool]  # (AdmissionCheck name, Active=True already)


def admission_check_record(check: Mapping[str, Any]) -> CheckRecord | None:
    """An AdmissionCheck this operator serves: its name and whether it is Active; else None."""
    if (check.get("spec") or {}).get("controllerName") != N.KUEUE_PAIR_CHECK_CONTROLLER:
        return None
    conditions = (check.get("status") or {}).get("conditions") or []
    active = any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions)
    return str((check.get("metadata") or {}).get("name")), active


def workload_replicas(
    children: Mapping[tuple[str, str], Mapping[str, Any]], name: str, role: str
) -> int:
    """The replicas a role's (or the serving ``name``'s) workload asks for, from its live
    child (1 when not seen yet: at least one Workload of it must be there)."""
    child_name = N.role_object_name(name, role) if role else name
    for kind in (N.LWS_KIND, "Deployment"):
        child = children.get((kind, child_name))
        if child is not None:
            return int((child.get("spec") or {}).get("replicas") or 0)
    return 1


def wanted_replicas(
    workloads: Mapping[str, Sequence[WorkloadFacts]],
    children: Mapping[tuple[str, str], Mapping[str, Any]],
    name: str,
) -> dict[str, int]:
    """role → the replicas serving ``name``'s Workloads of that role must cover.

    A pair wants both roles as soon as either has a Workload: Kueue creates one Workload per
    LeaderWorkerSet, and the peer's may not exist (or not be seen) yet when the first one's
    quota is reserved. Judging the pair by the roles seen so far would admit that one alone.
    """
    roles = set(workloads)
    if roles & set(N.PD_ROLE_NAMES):
        roles = (roles - {""}) | set(N.PD_ROLE_NAMES)
    return {role: workload_replicas(children, name, role) for role in sorted(roles)}


def workloads_by_role(facts: Iterable[WorkloadFacts]) -> dict[str, tuple[WorkloadFacts, ...]]:
    """role → one serving's Workloads of that role, by name ("" for an aggregated serving's)."""
    out: dict[str, list[WorkloadFacts]] = {}
    for one in facts:
        out.setdefault(one.role, []).append(one)
    return {role: tuple(sorted(ws, key=lambda f: f.name)) for role, ws in out.items()}


@dataclass(frozen=True)
class Admission:
    """The Admitted condition of a serving (or of one role): True when nothing waits."""

    ok: bool
    reason: str
    message: str


def admission(
    queue_name: str | None,
    kueue_served: bool,
    workloads: Sequence[WorkloadFacts],
    replicas: int,
) -> Admission | None:
    """The Admitted condition from Kueue's Workloads of one workload (the serving's or a
    role's), or None when ``spec.queueName`` is unset (no condition at all).

    ``replicas``: the replicas the workload asks for; Kueue makes one Workload for each, so
    fewer Workloads than replicas means Kueue has not seen them all yet.
    """
    if not queue_name:
        return None
    if not kueue_served:
        return Admission(
            True,
            N.REASON_KUEUE_NOT_INSTALLED,
            f"spec.queueName {queue_name!r} has no effect: the cluster serves no "
            f"{KUEUE_API_VERSION} Workload, so nothing waits for quota; {KUEUE_INSTALL_HINT}",
        )
    live = sorted((w for w in workloads if not w.finished), key=lambda w: w.name)
    admitted = sum(1 for w in live if w.admitted)
    counted = f"{admitted}/{replicas} replicas admitted through LocalQueue {queue_name!r}"
    evicted = [w for w in live if w.evicted and not w.admitted]
    if evicted:
        w = evicted[0]
        return Admission(
            False,
            N.REASON_KUEUE_EVICTED,
            f"{counted}; Kueue evicted Workload {w.name}: {w.evicted} (its pods are removed "
            "and it starts again whole once readmitted)",
        )
    waiting = [w for w in live if not w.admitted]
    if waiting:
        w = waiting[0]
        if w.quota_reserved:
            return Admission(
                False,
                N.REASON_KUEUE_QUOTA_RESERVED,
                f"{counted}; Workload {w.name} has quota reserved, its admission checks pending",
            )
        why = w.pending or "waiting for Kueue to reserve quota"
        return Admission(
            False, N.REASON_KUEUE_PENDING, f"{counted}; Workload {w.name} waits: {why}"
        )
    if admitted < replicas:
        return Admission(
            False,
            N.REASON_KUEUE_NO_WORKLOAD,
            f"{counted}; Kueue has not made a Workload for every replica yet",
        )
    return Admission(True, N.REASON_KUEUE_ADMITTED, counted)


@dataclass(frozen=True)
class CheckUpdate:
    """One admission check state to write on one Workload."""

    workload: str
    check: str
    state: str
    message: str


PAIR_READY = "every Workload of both roles has quota reserved: the pair is admitted together"


def pair_check_updates(
    workloads: Mapping[str, Sequence[WorkloadFacts]],
    wanted: Mapping[str, int],
    ours: frozenset[str],
) -> list[CheckUpdate]:
    """The states of the operator's admission checks (``ours``: their names) to write on one
    serving's Workloads (by role; ``wanted``: the replicas each role's workload asks for).

    A prefill/decode pair: every check turns Ready together, once every role has all its
    Workloads with quota reserved; until then Kueue keeps them Pending and no pod of either role
    is ungated. An aggregated serving (one role, ``""``) has no peer: a Workload's check turns
    Ready as soon as its quota is reserved. A Ready check is never taken back (Kueue would evict).
    """
    live = _live(workloads)
    pair = set(wanted) - {""}
    whole = bool(pair) and _whole(live, wanted)
    out = []
    for ws in live.values():
        for w in ws:
            ready = whole if pair else _reserved([w])
            out += [
                CheckUpdate(w.name, check, "Ready", PAIR_READY if pair else "quota reserved")
                for check, state in w.checks
                if check in ours and state != "Ready" and ready
            ]
    return out


def _live(workloads: Mapping[str, Sequence[WorkloadFacts]]) -> dict[str, list[WorkloadFacts]]:
    return {role: [w for w in ws if not w.finished] for role, ws in workloads.items()}


def _reserved(ws: Sequence[WorkloadFacts]) -> bool:
    return all(w.quota_reserved or w.admitted for w in ws)


def _whole(live: Mapping[str, Sequence[WorkloadFacts]], wanted: Mapping[str, int]) -> bool:
    return all(
        len(live.get(role, [])) >= n and _reserved(live.get(role, [])) for role, n in wanted.items()
    )


#: How long a role of a pair may hold reserved quota while its peer has none, before the
#: operator gives it back (docs/kueue.md, "Quota held while the peer waits").
PAIR_HOLD_S = 120.0

PairKey = tuple[str, str]  # (namespace, serving)


@dataclass(frozen=True)
class PairRetries:
    """Check states that give held quota back, and when the rule must look again."""

    updates: tuple[tuple[str, CheckUpdate], ...]  # (namespace, update)
    next_at: float | None  # the earliest time a hold now younger than the limit expires


def pair_retries(
    pairs: Mapping[PairKey, tuple[Mapping[str, Sequence[WorkloadFacts]], Mapping[str, int]]],
    ours: frozenset[str],
    now: float,
    hold_s: float = PAIR_HOLD_S,
) -> PairRetries:
    """Which pairs give back the quota one role holds while the other role has none.

    ``pairs``: every disaggregated serving with Workloads, as (Workloads by role, replicas each
    role asks for). Two pairs can each hold one role's quota with none left for either peer: a
    deadlock only a release ends. The rule releases by age (wound-wait): the pair whose oldest
    Workload is oldest keeps what it holds; every younger pair holding quota for longer than
    ``hold_s`` sets its checks to ``Retry``, Kueue releases that quota and requeues the Workloads
    behind those already waiting, so the oldest pair's peer gets it. One pair alone never
    releases: nothing else could use what it holds sooner.
    """
    holders: list[tuple[float, PairKey, list[WorkloadFacts]]] = []
    for key, (workloads, wanted) in pairs.items():
        if not set(wanted) - {""}:
            continue  # aggregated: nothing to wait for
        live = _live(workloads)
        if _whole(live, wanted):
            continue
        held = [
            w
            for ws in live.values()
            for w in ws
            if w.quota_reserved and not w.admitted and any(c in ours for c, _ in w.checks)
        ]
        if held:
            age = min(w.created_at for ws in live.values() for w in ws)
            holders.append((age, key, held))
    holders.sort(key=lambda h: (h[0], h[1]))
    updates: list[tuple[str, CheckUpdate]] = []
    next_at: float | None = None
    for _age, (namespace, name), held in holders[1:]:  # the oldest keeps its quota
        for w in held:
            expires = w.reserved_at + hold_s
            if now < expires:
                next_at = expires if next_at is None else min(next_at, expires)
                continue
            message = (
                f"serving {name!r}: this role held quota {hold_s:.0f} s while its peer had none "
                f"and an older pair waited; released for it, requeued"
            )
            updates += [
                (namespace, CheckUpdate(w.name, check, "Retry", message))
                for check, state in w.checks
                if check in ours and state != "Retry"
            ]
    return PairRetries(tuple(updates), next_at)
