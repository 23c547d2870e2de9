"""The ONE pipeline from a DeepSeekServing to what the operator writes: ``plan()``.

``plan(serving, inventory, observed, now)`` decides (engine), renders the children (render) and
builds the status, all pure. The offline ``render`` command calls it with
:meth:`Observed.offline`; the reconciler calls it with what the cluster shows and keeps only
I/O (locks, read-your-writes caches, writes, events), so ``render`` shows exactly what the
operator would do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from deepseek_operator.api.load import ServingObject
from deepseek_operator.api.roles import ROLE_KINDS
from deepseek_operator.api.status import (
    Condition,
    DeepSeekServingStatus,
    GroupStatus,
    RoleStatus,
    RouterStatus,
    WeightsStatus,
)
from deepseek_operator.engine.cluster_apis import ClusterApis
from deepseek_operator.engine.decision import resolve
from deepseek_operator.engine.disaggregated import RoleDecision, apart, resolve_roles
from deepseek_operator.engine.kueue import WorkloadFacts, admission
from deepseek_operator.engine.queueing import workload_size
from deepseek_operator.engine.resolution import Resolution
from deepseek_operator.engine.stability import PreviousDecision
from deepseek_operator.names import (
    COMPUTE_DOMAIN_KIND,
    LABEL_PD_ROLE,
    LWS_KIND,
    WORKLOAD_APPLIED,
    role_object_name,
)
from deepseek_operator.nodes.claims import ClaimOwner
from deepseek_operator.nodes.facts import NodeInventory
from deepseek_operator.render.kv_transfer import inference_pool, with_template_hash
from deepseek_operator.render.metadata import child_metadata as render_service_metadata
from deepseek_operator.render.role_status import disaggregated_status, held_pair, role_status
from deepseek_operator.render.router import (
    engine_policy,
    render_router,
    router_name,
    router_policy,
    with_router,
)
from deepseek_operator.render.status import build_status, invalid_spec_status, status_dict
from deepseek_operator.render.weights import WeightsState, with_weights
from deepseek_operator.render.workload import render_objects

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
        if status is None or status.resolved is None or not status.resolved.moe_backend:
            return None
        if status.observed_generation != self.generation:
            return None
        return PreviousDecision(
            status.resolved.moe_backend,
            status.decision.reason if status.decision else "",
            serving=status.ready_replicas > 0,
        )

    def role_previous_decision(self, kind: str) -> PreviousDecision | None:
        """The decision running for role ``kind`` of THIS generation (as :meth:`previous_decision`)."""
        role = self._role_status(kind)
        if role is None or role.resolved is None or not role.resolved.moe_backend:
            return None
        if self.status is None or self.status.observed_generation != self.generation:
            return None
        return PreviousDecision(
            role.resolved.moe_backend,
            role.decision.reason if role.decision else "",
            serving=role.ready_replicas > 0,
        )

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


@dataclass(frozen=True)
class Plan:
    """The decision, the children to apply (in order) and the status to write."""

    resolution: Resolution
    objects: list[dict[str, Any]]
    status: DeepSeekServingStatus
    # A disaggregated serving: every role's decision (``resolution`` is the one that speaks for
    # the pair: the first role that cannot run or be placed, else decode).
    roles: tuple[RoleDecision, ...] = ()
    # A disaggregated serving one of whose roles cannot run: no child is written or deleted
    # (its live pair, if any, keeps serving); only the status is.
    holds_children: bool = False

    @property
    def status_dict(self) -> dict[str, Any]:
        """The status as the camelCase JSON object written to the API server."""
        return status_dict(self.status)


def with_weights_gate(
    planned: Plan, state: WeightsState, observed: Observed, generation: int, now: str
) -> Plan:
    """``planned`` behind ``spec.modelCache.fill``: ``WeightsReady`` and ``status.weights`` in its
    status and, until the weights are in the cache, its children held (no vLLM pod is created;
    one already running, from before a fill Job was deleted, is left as it is)."""
    status = with_weights(
        planned.status, state, generation=generation, now=now, previous=observed.conditions
    )
    return replace(planned, status=status, holds_children=planned.holds_children or not state.ready)


def claim_owner(serving: ServingObject) -> ClaimOwner:
    """The workloads whose pods' ResourceClaims are ``serving``'s own: its Deployment or
    LeaderWorkerSet, or each role's of a disaggregated serving."""
    if serving.spec.disaggregation is None:
        return ClaimOwner(serving.namespace, frozenset({serving.name}))
    return ClaimOwner(
        serving.namespace, frozenset(role_object_name(serving.name, k) for k in ROLE_KINDS)
    )


def plan(
    serving: ServingObject,
    inventory: NodeInventory,
    observed: Observed,
    now: str,
    apis: ClusterApis | None = None,
) -> Plan:
    """Decide, render and build the status of ``serving`` on ``inventory`` (pure; ``now`` passed in).

    ``apis``: what the cluster serves (LeaderWorkerSet, ComputeDomain); default: both.
    """
    if serving.spec.disaggregation is not None:
        return _plan_roles(serving, inventory, observed, now, apis)
    previous = observed.previous_decision()
    # resolve() is pure: objects with one spec, and every re-reconcile of an object (child
    # events, resyncs) on the same inventory, share one evaluation.
    owner = claim_owner(serving)
    res = inventory.memoized(
        ("resolve", serving.spec.model_dump_json(), previous, apis, inventory.claim_key(owner)),
        lambda: resolve(serving.spec, inventory, previous, apis, owner=owner),
    )
    rendered, status = _workload(
        serving,
        res,
        inventory,
        observed,
        now,
        generation=serving.generation,
        previous_conditions=observed.conditions,
        groups=observed.groups,
        kueue=(apis or ClusterApis()).kueue,
    )
    objects, status = _routing(serving, [(serving, res)], rendered, status, observed, now, apis)
    return Plan(resolution=res, objects=objects, status=status)


def _workload(
    obj: ServingObject,
    res: Resolution,
    inventory: NodeInventory,
    observed: Observed,
    now: str,
    *,
    generation: int,
    previous_conditions: tuple[Condition, ...],
    groups: Mapping[int, GroupPods],
    kueue: bool,
) -> tuple[list[dict[str, Any]], DeepSeekServingStatus]:
    """One workload's children and status from its decision: the serving's own, or a role's
    (``obj`` is then the role's projection, ``previous_conditions`` and ``groups`` its own).

    The replicas it may create now (:func:`workload_size`: capacity and maxPendingReplicas) size
    both the rendered workload and the status. ``kueue``: whether the cluster serves Kueue (the
    Admitted condition, with ``spec.queueName``, of a live serving only: offline, no Workload
    can have been seen).
    """
    size = workload_size(
        obj.spec.replicas,
        res.placement.capacity,
        obj.spec.max_pending_replicas,
        observed.applied_replicas(res, obj),
    )
    status = build_status(
        res,
        generation=generation,
        ready_replicas=observed.ready_replicas(res, obj) if observed.live else 0,
        now=now,
        previous_conditions=previous_conditions,
        observed=observed.live,
        pod_refusal=observed.pod_refusal(),
        workload_size=size,
        groups=group_statuses(res, inventory, groups) if res.pods_per_replica > 1 else (),
        admission=admission(
            obj.spec.queue_name, kueue, observed.workloads.get(obj.role, ()), size.replicas
        )
        if observed.live
        else None,
    )
    return render_objects(obj, res, size.replicas), status


def _routing(
    serving: ServingObject,
    workloads: list[tuple[ServingObject, Resolution]],
    objects: list[dict[str, Any]],
    status: DeepSeekServingStatus,
    observed: Observed,
    now: str,
    apis: ClusterApis | None,
) -> tuple[list[dict[str, Any]], DeepSeekServingStatus]:
    """The router's children and the engines' NetworkPolicies added to ``objects`` (the
    workloads' ``(object, resolution)``), and the endpoint, router and Ready in ``status``.

    Nothing is added where no workload is rendered. The NetworkPolicies come first, so no
    engine pod starts unfenced; the router's Service replaces the engines' ``<name>-api``.
    """
    spec = serving.spec
    image = spec.router.image or (apis or ClusterApis()).router_image
    if objects:
        policies = [p for w, r in workloads if (p := engine_policy(serving, w, r))]
        if spec.router_active:
            multi_pod = any(r.pods_per_replica > 1 for _, r in workloads)
            endpoint = router_name(serving)
            objects = [
                o for o in objects if (o["kind"], o["metadata"]["name"]) != ("Service", endpoint)
            ]
            objects += render_router(serving, multi_pod, image)
            policies.append(router_policy(serving))
        objects = policies + objects
    router = None
    if spec.router_active:
        live = observed.children.get(("Deployment", router_name(serving))) or {}
        ready = int((live.get("status") or {}).get("readyReplicas") or 0) if observed.live else 0
        router = RouterStatus(replicas=spec.router.replicas, ready_replicas=ready, image=image)
    status = with_router(status, serving, router, now=now, previous=observed.conditions)
    return objects, status


def _plan_roles(
    serving: ServingObject,
    inventory: NodeInventory,
    observed: Observed,
    now: str,
    apis: ClusterApis | None,
) -> Plan:
    """A disaggregated serving: each role decided, rendered and reported as an aggregated one.

    Nothing is rendered unless every role can: a half-created pair (a prefill pool without
    its decode pool) would load weights for nothing. Such a plan holds the children: an edit
    that makes one role unrunnable leaves the running pair as it is, rather than deleting it.
    """
    spec = serving.spec
    assert spec.disaggregation is not None
    previous: dict[str, PreviousDecision] = {
        r.role: p
        for r in spec.disaggregation.roles
        if (p := observed.role_previous_decision(r.role))
    }
    decided = resolve_roles(
        spec, inventory, previous, apis, inventory.memoized, owner=claim_owner(serving)
    )
    objects: list[dict[str, Any]] = []
    statuses = []
    for d in decided:
        rendered, status = _workload(
            serving.for_role(d.role),
            d.resolution,
            inventory,
            observed,
            now,
            generation=serving.generation,
            previous_conditions=observed.role_conditions(d.role),
            groups=observed.role_groups.get(d.role, {}),
            kueue=(apis or ClusterApis()).kueue,
        )
        statuses.append(role_status(d.role, status))
        for child in map(with_template_hash, rendered):
            if child["kind"] == COMPUTE_DOMAIN_KIND:
                # One ComputeDomain serves both roles (the serving's, no role label): once.
                if any(o["kind"] == COMPUTE_DOMAIN_KIND for o in objects):
                    continue
                labels = child["metadata"]["labels"]
                child["metadata"]["labels"] = {
                    k: v for k, v in labels.items() if k != LABEL_PD_ROLE
                }
            objects.append(child)
    pool_meta = {
        k: v for k, v in render_service_metadata(serving).items() if k not in ("name", "namespace")
    }
    pool = inference_pool(serving.name, serving.namespace, spec, pool_meta)
    if pool is not None and (apis or ClusterApis()).inference_pool:
        objects.append(pool)
    # Held: a role cannot run, or the pair cannot be placed together (render refuses it): one
    # role's pods would hold GPUs while its peer's stay Pending.
    held = (
        not all(d.resolution.backend_runnable for d in decided)
        or not all(
            d.resolution.leader_worker_set or d.resolution.pods_per_replica == 1 for d in decided
        )
        or apart(decided) is not None
    )
    speaker = next(
        (d for d in decided if not d.resolution.backend_runnable),
        next((d for d in decided if not d.resolution.placement.placeable), decided[-1]),
    )
    status = disaggregated_status(
        statuses, generation=serving.generation, now=now, previous_conditions=observed.conditions
    )
    workloads = [(serving.for_role(d.role), d.resolution) for d in decided]
    objects, status = _routing(serving, workloads, objects, status, observed, now, apis)
    return Plan(
        resolution=speaker.resolution,
        objects=[] if held else objects,
        status=held_pair(status, live=bool(observed.children)) if held else status,
        roles=decided,
        holds_children=held,
    )


def group_statuses(
    res: Resolution, inventory: NodeInventory, groups: Mapping[int, GroupPods]
) -> list[GroupStatus]:
    """Each observed group: leader pod, the NVLink clique of its nodes, nodes, pods ready."""
    out = []
    for index in sorted(groups):
        pods = groups[index]
        nodes = [pods[w].node for w in sorted(pods)]
        cliques = sorted(
            {clique for node in nodes if node and (clique := _clique_of(inventory, node, res))}
        )
        out.append(
            GroupStatus(
                index=index,
                leader_pod=pods[0].name if 0 in pods else "",
                clique=", ".join(cliques) or None,
                nodes=nodes,
                pods_ready=sum(1 for p in pods.values() if p.ready),
                pods_total=res.pods_per_replica,
            )
        )
    return out


def _clique_of(inventory: NodeInventory, node: str, res: Resolution) -> str | None:
    """The NVLink clique of ``node``: the value of the label groups are confined by, if any."""
    facts = inventory.named(node)
    if facts is None:
        return None
    return facts.labels.get(res.clique_key) if res.clique_key else facts.clique


def invalid_spec_plan_status(observed: Observed, message: str, now: str) -> dict[str, Any]:
    """The status for a spec that breaks a static rule: the last one, with InvalidSpec conditions."""
    return invalid_spec_status(
        observed.raw_status,
        observed.conditions,
        generation=observed.generation,
        message=message,
        now=now,
    )
