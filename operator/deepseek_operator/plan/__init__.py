"""The ONE pipeline from a DeepSeekServing to what the operator writes: ``plan()``.

``plan(serving, inventory, observed, now)`` decides (engine), renders the children (render) and
builds the status, all pure. The offline ``render`` command calls it with
:meth:`Observed.offline`; the reconciler calls it with what the cluster shows and keeps only
I/O (locks, read-your-writes caches, writes, events), so ``render`` shows exactly what the
operator would do.

Here: the pipeline itself, for a single pool and per role of a disaggregated pair (both through
the one :func:`_workload` and :func:`_routing`). What the cluster shows is
:mod:`.observed`'s (:class:`Observed`); the plan's own parts of the status, :mod:`.status`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from deepseek_operator.api.load import ServingObject
from deepseek_operator.api.roles import ROLE_KINDS
from deepseek_operator.api.status import DeepSeekServingStatus, RouterStatus
from deepseek_operator.engine.cluster_apis import ClusterApis
from deepseek_operator.engine.decision import resolve
from deepseek_operator.engine.disaggregated import RoleDecision, apart, resolve_roles
from deepseek_operator.engine.kueue import admission
from deepseek_operator.engine.queueing import workload_size
from deepseek_operator.engine.resolution import Resolution
from deepseek_operator.engine.stability import PreviousDecision
from deepseek_operator.names import COMPUTE_DOMAIN_KIND, LABEL_PD_ROLE, role_object_name
from deepseek_operator.nodes.claims import ClaimOwner
from deepseek_operator.nodes.facts import NodeInventory
from deepseek_operator.plan.observed import ChildKey, GroupPods, Observed, PodSeen, RoleWorkloads
from deepseek_operator.plan.status import group_statuses, invalid_spec_plan_status
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
from deepseek_operator.render.status import build_status, status_dict
from deepseek_operator.render.weights import WeightsState, with_weights
from deepseek_operator.render.workload import render_objects

__all__ = [
    # What the cluster shows (plan.observed) and the plan's status parts (plan.status): the
    # pipeline's inputs and helpers, named here too so its callers import one package.
    "ChildKey",
    "GroupPods",
    "Observed",
    "Plan",
    "PodSeen",
    "RoleWorkloads",
    "claim_owner",
    "group_statuses",
    "invalid_spec_plan_status",
    "plan",
    "with_weights_gate",
]


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
    rendered, status = _workload(serving, res, inventory, observed, now, apis)
    objects, status = _routing(serving, [(serving, res)], rendered, status, observed, now, apis)
    return Plan(resolution=res, objects=objects, status=status)


def _workload(
    obj: ServingObject,
    res: Resolution,
    inventory: NodeInventory,
    observed: Observed,
    now: str,
    apis: ClusterApis | None,
) -> tuple[list[dict[str, Any]], DeepSeekServingStatus]:
    """One workload's children and status from its decision: the serving's own, or a role's
    (``obj`` is then the role's projection: its conditions and groups are the role's own).

    The replicas it may create now (:func:`workload_size`: capacity and maxPendingReplicas) size
    both the rendered workload and the status. ``apis``: whether the cluster serves Kueue (the
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
        generation=obj.generation,
        ready_replicas=observed.ready_replicas(res, obj) if observed.live else 0,
        now=now,
        previous_conditions=observed.workload_conditions(obj.role),
        observed=observed.live,
        pod_refusal=observed.pod_refusal(),
        workload_size=size,
        groups=group_statuses(res, inventory, observed.workload_groups(obj.role))
        if res.pods_per_replica > 1
        else (),
        admission=admission(
            obj.spec.queue_name,
            (apis or ClusterApis()).kueue,
            observed.workloads.get(obj.role, ()),
            size.replicas,
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
            serving.for_role(d.role), d.resolution, inventory, observed, now, apis
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
