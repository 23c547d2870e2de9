"""The backend decision: ``resolve(spec, inventory, previous)`` → :class:`Resolution`.

An ordered chain of checks mirrors vLLM's rules (docs/decision-rules.md, the R- and A-numbers):

* ``auto`` becomes ``deep_gemm_mega_moe`` only when every rule R2–R14 holds (the reconstructed
  rules of vLLM PR #57220, scoped to DeepSeek V4.1) AND the SM100, fully NVLink-connected nodes
  can hold every replica. Otherwise it stays ``auto`` and the first failing check is the reason.
* An explicit backend is kept verbatim and checked against vLLM's hard guards (A1–A10 for the
  MegaMoE backends, the MXFP4 oracle's map for the others). A failing guard makes the backend
  unrunnable: ``BackendResolved=False`` and the pods are pinned to nodes where it would run.
* Sequence parallelism follows vLLM's ``_use_sequence_parallel`` exactly (:mod:`.layout`).
* Stability (:mod:`.stability`): node churn changes a running decision only when no eligible node
  is left for it; a better decision is only reported.

Every check is evaluated (the chain never short-circuits), so the status shows them all.
The deciders per backend are :mod:`.deciders`; the KVCacheCapacity step is :mod:`.capacity_fit`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from deepseek_operator.api.backends import AUTO
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.engine import layout_advice, node_checks
from deepseek_operator.engine.capacity_fit import with_capacity
from deepseek_operator.engine.capacity_report import CapacityReport
from deepseek_operator.engine.cluster_apis import ClusterApis
from deepseek_operator.engine.deciders import (
    decide_auto,
    decide_explicit_mega_moe,
    decide_explicit_other,
    release_refusal,
)
from deepseek_operator.engine.layout import layout_of
from deepseek_operator.engine.model_facts import model_facts
from deepseek_operator.engine.placement import candidates, excluded_gpu_nodes, pool_clique_key
from deepseek_operator.engine.release import choose_release
from deepseek_operator.engine.resolution import DecisionInputs, Resolution
from deepseek_operator.engine.stability import PreviousDecision, keep_previous
from deepseek_operator.names import REASON_LWS_NOT_INSTALLED
from deepseek_operator.nodes.claims import ClaimOwner
from deepseek_operator.nodes.facts import NodeFacts, NodeInventory


def resolve(
    spec: DeepSeekServingSpec,
    inventory: NodeInventory,
    previous: PreviousDecision | None = None,
    apis: ClusterApis | None = None,
    kv_role: str | None = None,
    owner: ClaimOwner | None = None,
    advise: bool = True,
) -> Resolution:
    """Decide the MoE backend, sequence parallelism and placement for ``spec`` on ``inventory``.

    A replica of several pods (remote DP) is one LeaderWorkerSet group; in a pool of multi-node
    NVLink trays every group is confined to one NVLink clique (``apis`` says what the cluster
    serves: LeaderWorkerSet, NVIDIA's ComputeDomain). ``kv_role``: the role of a disaggregated
    serving whose projected spec ``spec`` is (its KV-transfer refusals are checked too).
    ``owner``: the serving's workloads, whose pods' ResourceClaims hold DRA devices that are
    free for it (devices any other claim holds are not). ``advise``: list the other layouts of
    the same GPUs the decision rules accept in the capacity report (engine/layout_advice.py),
    and with auto the other MoE path's figures; without (a layout the advice weighs, or argv
    alone), neither is computed.
    """
    apis = apis or ClusterApis()
    facts = model_facts(spec.model)
    claim_owner = inventory.claim_key(owner)
    # What decides the candidate nodes: every spec with the same key, on the same inventory,
    # shares them and every result computed over them (placements, node checks), so a fleet
    # of objects on a few pools walks each pool's nodes once per node change, not once per
    # object and reconcile.
    pool = (
        "pool",
        spec.gpu_resource_name,
        tuple(sorted(spec.node_selector.items())),
        tuple(spec.tolerations),
        claim_owner,
    )

    def shared(key: Hashable, compute: Callable[[], Any]) -> Any:
        return inventory.memoized((pool, key), compute)

    cands: tuple[NodeFacts, ...] = shared("candidates", lambda: tuple(candidates(spec, inventory)))
    layout = layout_of(spec, facts.vram_minimum_gb)
    multi_pod = layout.pods_per_replica > 1
    inputs = DecisionInputs(
        spec=spec,
        facts=facts,
        candidates=cands,
        layout=layout,
        release=choose_release(spec),
        clique_key=shared("clique_key", lambda: pool_clique_key(cands)) if multi_pod else None,
        shared=shared,
        excluded=shared("excluded", lambda: excluded_gpu_nodes(spec, inventory)),
        kv_role=kv_role,
        claim_owner=claim_owner,
    )
    requested = spec.moe_backend
    refused = release_refusal(inputs, requested)
    if refused is not None:
        return _multi_pod(refused, inputs, apis) if multi_pod else refused
    rules = inputs.release.rules
    assert rules is not None  # release_refusal returned for an unsupported release
    if requested == AUTO:
        res = decide_auto(inputs)
        if previous is not None and previous.moe_backend != res.moe_backend:
            res = keep_previous(inputs, res, previous)
    elif rules.is_mega_moe(requested):
        res = decide_explicit_mega_moe(inputs, requested)
    else:
        res = decide_explicit_other(inputs, requested)
    res = with_capacity(inputs, res, what_if=advise)
    if advise and not multi_pod and res.capacity is not None and res.capacity.rows:
        res = _with_layout_advice(res, spec, inventory, apis, kv_role, owner)
    # With ``auto``, pods claim through DRA only where every node of their pool has its GPUs
    # as DRA devices: a pool without one such node is decided once, not walked per decision.
    dra_pool = spec.gpu_allocation != "auto" or shared(
        "any_dra", lambda: any(n.gpus_from_dra for n in cands)
    )
    if dra_pool and claims_gpus(spec, cands, res):
        res = dataclasses.replace(res, gpu_claims=True)
    if not multi_pod:
        return res
    return _multi_pod(res, inputs, apis)


def _with_layout_advice(
    res: Resolution,
    spec: DeepSeekServingSpec,
    inventory: NodeInventory,
    apis: ClusterApis,
    kv_role: str | None,
    owner: ClaimOwner | None,
) -> Resolution:
    """``res`` with the layouts of the same GPUs that the decision rules accept: each alternative
    is decided as the user's spec is (its backend runs and its replicas place), never applied."""
    assert res.capacity is not None
    if not layout_advice.advisable(spec):
        return res

    def decide(alternative: DeepSeekServingSpec) -> CapacityReport | None:
        out = resolve(alternative, inventory, None, apis, kv_role, owner, advise=False)
        return out.capacity if out.backend_runnable and out.placement.placeable else None

    # The alternatives are decided without the previous decision, so every reconcile of one
    # spec on one inventory (and every serving of that spec) shares one entry for all of them.
    key = ("layout-advice", spec.model_dump_json(), apis, kv_role, inventory.claim_key(owner))
    others = inventory.memoized(key, lambda: layout_advice.alternatives(spec, decide))
    layouts = layout_advice.options(spec, res.capacity, others)
    return dataclasses.replace(res, capacity=dataclasses.replace(res.capacity, layouts=layouts))


def claims_gpus(spec: DeepSeekServingSpec, cands: Sequence[NodeFacts], res: Resolution) -> bool:
    """Whether pods claim GPUs through DRA: ``spec.gpuAllocation``, or with ``auto`` when every
    eligible node (every candidate, when none is eligible) has its GPUs only as
    ``gpu.nvidia.com`` devices. A pod can take GPUs one way only, and a DRA-only node has no
    allocatable GPUs a limit could take, so the pool the pods go to decides."""
    if spec.gpu_allocation != "auto":
        return spec.gpu_allocation == "dra"
    eligible = set(res.placement.eligible)
    pool = [n for n in cands if n.name in eligible] or list(cands)
    return bool(pool) and all(n.gpus_from_dra for n in pool)


def _multi_pod(res: Resolution, inputs: DecisionInputs, apis: ClusterApis) -> Resolution:
    """A multi-pod decision on this cluster: LeaderWorkerSet served, IMEX channels per pod."""
    mode = apis.compute_domain_mode(needed=inputs.clique_key is not None)
    res = dataclasses.replace(res, compute_domain=mode, leader_worker_set=apis.leader_worker_set)
    lws = node_checks.leader_worker_set(apis.leader_worker_set, inputs.layout.pods_per_replica)
    if apis.leader_worker_set:
        return dataclasses.replace(res, checks=(*res.checks, lws))
    placement = dataclasses.replace(
        res.placement, placeable=False, reason=REASON_LWS_NOT_INSTALLED, message=lws.message
    )
    return dataclasses.replace(res, checks=(*res.checks, lws), placement=placement)
