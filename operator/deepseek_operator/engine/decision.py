"""The backend decision: ``resolve(spec, inventory, previous)`` → :class:`Resolution`.

An ordered chain of checks mirrors vLLM's rules (vllm-rules.md):

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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from typing import Any

from deepseek_operator.api.backends import AUTO, DEEP_GEMM_MEGA_MOE
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.engine import capacity, capacity_report, model_checks, node_checks
from deepseek_operator.engine.chains import (
    AUTO_CHAIN,
    MEGA_MOE_CHAIN,
    RELEASE_CHAIN,
    ChainContext,
    fused_moe_checks,
    nvlink_fully_connected,
    run_chain,
)
from deepseek_operator.engine.checks import (
    CheckCategory,
    CheckResult,
    check,
    failed,
    short_list,
)
from deepseek_operator.engine.cluster_apis import ClusterApis
from deepseek_operator.engine.layout import layout_of
from deepseek_operator.engine.model_facts import model_facts
from deepseek_operator.engine.placement import (
    NodeRequirement,
    Requirement,
    candidates,
    excluded_gpu_nodes,
    pool_clique_key,
)
from deepseek_operator.engine.release import (
    choose_release,
    release_check,
)
from deepseek_operator.engine.resolution import DecisionInputs, Resolution
from deepseek_operator.engine.stability import PreviousDecision, keep_previous
from deepseek_operator.names import (
    REASON_EXPLICIT,
    REASON_KEPT_AUTO,
    REASON_LWS_NOT_INSTALLED,
    REASON_MEGA_MOE_SELECTED,
    failed_reason,
)
from deepseek_operator.nodes.facts import NodeFacts, NodeInventory


def resolve(
    spec: DeepSeekServingSpec,
    inventory: NodeInventory,
    previous: PreviousDecision | None = None,
    apis: ClusterApis | None = None,
) -> Resolution:
    """Decide the MoE backend, sequence parallelism and placement for ``spec`` on ``inventory``.

    A replica of several pods (remote DP) is one LeaderWorkerSet group; in a pool of multi-node
    NVLink trays every group is confined to one NVLink clique (``apis`` says what the cluster
    serves: LeaderWorkerSet, NVIDIA's ComputeDomain).
    """
    apis = apis or ClusterApis()
    facts = model_facts(spec.model)
    # What decides the candidate nodes: every spec with the same key, on the same inventory,
    # shares them and every result computed over them (placements, node checks), so a fleet
    # of objects on a few pools walks each pool's nodes once per node change, not once per
    # object and reconcile.
    pool = (
        "pool",
        spec.gpu_resource_name,
        tuple(sorted(spec.node_selector.items())),
        tuple(spec.tolerations),
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
    )
    requested = spec.moe_backend
    refused = _release_refusal(inputs, requested)
    if refused is not None:
        return _multi_pod(refused, inputs, apis) if multi_pod else refused
    rules = inputs.release.rules
    assert rules is not None  # _release_refusal returned for an unsupported release
    if requested == AUTO:
        res = _decide_auto(inputs)
        if previous is not None and previous.moe_backend != res.moe_backend:
            res = keep_previous(inputs, res, previous)
    elif rules.is_mega_moe(requested):
        res = _decide_explicit_mega_moe(inputs, requested)
    else:
        res = _decide_explicit_other(inputs, requested)
    res = _with_capacity(inputs, res)
    if not multi_pod:
        return res
    return _multi_pod(res, inputs, apis)


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


def _with_capacity(inputs: DecisionInputs, res: Resolution) -> Resolution:
    """The decision with its KVCacheCapacity check: auto keeps the FusedMoE path when MegaMoE
    cannot hold the asked requests but that path can; a path that cannot hold one request at
    maxModelLen is refused before pods start; an explicit backend short of
    ``spec.capacity.minConcurrentRequests`` is not placeable."""
    spec = inputs.spec
    mega = res.moe_backend == DEEP_GEMM_MEGA_MOE
    eligible = set(res.placement.eligible)
    nodes = [n for n in inputs.candidates if n.name in eligible] or list(inputs.candidates)
    gpus = inputs.over_candidates(
        ("capacity_gpu_types", tuple(sorted(eligible))), lambda: capacity.gpu_types(nodes)
    )
    rep = capacity_report.report(
        spec, inputs.facts, inputs.release.version, mega, gpus, with_other=spec.moe_backend == AUTO
    )
    passed, message = capacity_report.kv_cache_check(rep)
    result = check(
        capacity_report.KV_CACHE_CAPACITY, CheckCategory.FIT, "", passed=passed, message=message
    )
    checks = (*res.checks, result)
    res = dataclasses.replace(res, checks=checks, capacity=rep)
    # A coarser failure already decided (GPUMemory's recipe minimum): it stays the reason.
    earlier_fit = any(c.category is CheckCategory.FIT for c in res.failed_checks[:-1])
    if passed or not res.backend_runnable or earlier_fit:
        return res
    name = capacity_report.KV_CACHE_CAPACITY
    if spec.moe_backend == AUTO and mega:
        fused = capacity_report.CapacityReport(
            mega_moe=False,
            rows=rep.other,
            other=rep.rows,
            unknown="",
            min_requests=rep.min_requests,
        )
        if fused.holding:
            any_gpu = inputs.requirement(Requirement.ANY_GPU)
            kept = (
                f"auto kept (vLLM chooses its FusedMoE backend): {name} failed: {message}; "
                f"the FusedMoE path holds it: {capacity_report.kv_cache_check(fused)[1]}"
            )
            fused_check = check(name, CheckCategory.FIT, "", passed=True, message=kept)
            out = inputs.resolution(
                AUTO,
                failed_reason(name),
                kept,
                runnable=True,
                requirement=any_gpu,
                placement=inputs.place(any_gpu),
                checks=(*res.checks, fused_check),
                condition_reason=REASON_KEPT_AUTO,
            )
            return dataclasses.replace(out, capacity=fused)
    if rep.min_requests > 1 and any(r.concurrent_requests >= 1 for r in rep.rows):
        # It runs, but not with what the user asked for: keep the pods from being placed.
        placement = dataclasses.replace(
            res.placement, placeable=False, reason=failed_reason(name), message=message
        )
        return dataclasses.replace(res, placement=placement)
    requirement = inputs.requirement(Requirement.NONE, name)
    refused = (
        f"{res.moe_backend} cannot run: {name} failed: {message}; pods are pinned to no node so "
        "they stay Pending instead of failing in vLLM's KV-cache sizing"
    )
    out = inputs.resolution(
        res.moe_backend,
        failed_reason(name),
        refused,
        runnable=False,
        requirement=requirement,
        placement=inputs.place(requirement),
        checks=checks,
    )
    return dataclasses.replace(out, capacity=rep)


def _explicit_layout_hint(inputs: DecisionInputs) -> str:
    """What explicit multi-node MegaMoE layout the pool allows, for auto's remote-DP message."""
    layout = inputs.layout
    if layout.pods_per_replica <= 1 or inputs.clique_key is None:
        return ""
    placement = inputs.place(inputs.requirement(Requirement.MEGA_MOE))
    holding = placement.holding_cliques
    if not holding:
        return ""
    return (
        f". This pool would allow it explicitly: moeBackend deep_gemm_mega_moe with "
        f"{layout.pods_per_replica} pods of {layout.gpus_per_pod} GPUs per replica, each group "
        f"inside one NVLink clique ({short_list(list(holding))}; capacity "
        f"{placement.capacity} replica(s))"
    )


def _release_checks(inputs: DecisionInputs, backend: str) -> list[CheckResult]:
    """The checks that hold or fail whatever the nodes: the release, then (a supported release)
    :data:`~.chains.RELEASE_CHAIN`."""
    checks = [release_check(inputs.release)]
    rules = inputs.release.rules
    if rules is None:
        return checks
    return checks + run_chain(RELEASE_CHAIN, ChainContext(inputs, backend, rules))


def _fused_moe_checks(inputs: DecisionInputs) -> list[CheckResult]:
    rules = inputs.release.rules
    assert rules is not None
    return fused_moe_checks(inputs, rules)


def _release_refusal(inputs: DecisionInputs, backend: str) -> Resolution | None:
    """A resolution that cannot run when the release or a release-wide guard refuses the spec."""
    checks = _release_checks(inputs, backend)
    failures = failed(checks)
    if not failures:
        return None
    first = failures[0]
    requirement = inputs.requirement(Requirement.NONE, first.name)
    placement = inputs.place(requirement)
    checks.append(node_checks.capacity(placement, inputs.spec.replicas))
    message = (
        f"{backend} cannot run: {first.name} failed: {first.message}; pods are pinned to no "
        "node so they stay Pending instead of crashing"
    )
    return inputs.resolution(
        backend,
        failed_reason(first.name),
        message,
        runnable=False,
        requirement=requirement,
        placement=placement,
        checks=checks,
    )


def _not_eligible_note(inputs: DecisionInputs, requirement: NodeRequirement) -> str:
    """The SM100 candidates that ``requirement``'s placement leaves out."""
    return inputs.over_candidates(
        ("not_eligible_note", requirement, inputs.layout.gpus_per_pod),
        lambda: node_checks.not_eligible_note(inputs.sm100_candidates, inputs.place(requirement)),
    )


def _decide_auto(inputs: DecisionInputs) -> Resolution:
    mega_requirement = inputs.requirement(Requirement.MEGA_MOE)
    mega_placement = inputs.place(mega_requirement)
    rules = inputs.release.rules
    assert rules is not None
    checks = [
        *_release_checks(inputs, AUTO),
        *run_chain(AUTO_CHAIN, ChainContext(inputs, AUTO, rules)),
    ]
    failures = failed(checks)
    if not failures:
        message = (
            f"auto resolved to deep_gemm_mega_moe: all {len(checks)} checks passed; pods pinned "
            f"to the {len(mega_placement.eligible)} SM100 fully NVLink-connected node(s)"
            + _not_eligible_note(inputs, mega_requirement)
        )
        return inputs.resolution(
            DEEP_GEMM_MEGA_MOE,
            REASON_MEGA_MOE_SELECTED,
            message,
            runnable=True,
            requirement=mega_requirement,
            placement=mega_placement,
            checks=checks,
        )
    first = failures[0]
    # auto stays auto: vLLM then takes its FusedMoE path, whose own checks decide if it runs.
    fused_failures = failed(_fused_moe_checks(inputs))
    if fused_failures:
        checks += fused_failures
        requirement = inputs.requirement(Requirement.NONE, fused_failures[0].name)
        message = (
            f"auto cannot run: {fused_failures[0].name} failed: {fused_failures[0].message} "
            f"(auto kept, {first.name} failed); pods are pinned to no node so they stay Pending "
            "instead of crashing"
        )
        return inputs.resolution(
            AUTO,
            failed_reason(fused_failures[0].name),
            message,
            runnable=False,
            requirement=requirement,
            placement=inputs.place(requirement),
            checks=checks,
        )
    any_gpu = inputs.requirement(Requirement.ANY_GPU)
    message = f"auto kept (vLLM chooses its FusedMoE backend): {first.name} failed: {first.message}"
    # Remote DP never becomes MegaMoE under auto (R10); say what an explicit backend could do.
    message += _explicit_layout_hint(inputs)
    return inputs.resolution(
        AUTO,
        failed_reason(first.name),
        message,
        runnable=True,
        requirement=any_gpu,
        placement=inputs.place(any_gpu),
        checks=checks,
        condition_reason=REASON_KEPT_AUTO,
    )


def _decide_explicit_mega_moe(inputs: DecisionInputs, backend: str) -> Resolution:
    spec = inputs.spec
    rules = inputs.release.rules
    assert rules is not None
    node_requirement = inputs.requirement(Requirement.SM100)
    ctx = ChainContext(inputs, backend, rules)
    checks = [*_release_checks(inputs, backend), *run_chain(MEGA_MOE_CHAIN, ctx)]
    one_nvlink_domain = ctx.one_nvlink_domain
    # A spec guard no node can satisfy pins the pods to no node; a node guard pins to its nodes.
    spec_failures = [c for c in failed(checks) if c.category is CheckCategory.SPEC]
    if spec_failures:
        requirement = inputs.requirement(Requirement.NONE, spec_failures[0].name)
    elif one_nvlink_domain and inputs.clique_key is None:
        requirement = inputs.requirement(Requirement.NONE, "NVLinkClique")
    else:
        requirement = node_requirement
    placement = inputs.place(requirement)
    nvlink = nvlink_fully_connected(inputs)
    checks.append(node_checks.as_information(nvlink, " (not enforced for an explicit backend)"))
    checks.append(node_checks.capacity(placement, spec.replicas))
    enforced_failures = [c for c in failed(checks) if c.enforced]
    if enforced_failures:
        first = enforced_failures[0]
        message = (
            f"explicit {backend} cannot run: {first.name} failed: {first.message}; pods are "
            "pinned so they stay Pending instead of crashing after loading weights"
        )
        return inputs.resolution(
            backend,
            failed_reason(first.name),
            message,
            runnable=False,
            requirement=requirement,
            placement=placement,
            checks=checks,
        )
    message = (
        f"explicit {backend} kept; vLLM's MegaMoE guards hold on {len(placement.eligible)} node(s)"
    )
    return inputs.resolution(
        backend,
        REASON_EXPLICIT,
        message,
        runnable=True,
        requirement=requirement,
        placement=placement,
        checks=checks,
    )


def _decide_explicit_other(inputs: DecisionInputs, backend: str) -> Resolution:
    guards = [model_checks.explicit_backend(inputs.facts, backend), *_fused_moe_checks(inputs)]
    release = _release_checks(inputs, backend)
    guard_failures = failed(guards)
    if guard_failures:
        guard = guard_failures[0]
        requirement = inputs.requirement(Requirement.NONE, guard.name)
        placement = inputs.place(requirement)
        checks = [*release, *guards, node_checks.capacity(placement, inputs.spec.replicas)]
        message = f"explicit {backend} cannot run: {guard.message}"
        return inputs.resolution(
            backend,
            failed_reason(guard.name),
            message,
            runnable=False,
            requirement=requirement,
            placement=placement,
            checks=checks,
        )
    requirement = inputs.requirement(Requirement.ANY_GPU)
    placement = inputs.place(requirement)
    checks = [*release, *guards, node_checks.capacity(placement, inputs.spec.replicas)]
    return inputs.resolution(
        backend,
        REASON_EXPLICIT,
        f"explicit {backend} kept verbatim",
        runnable=True,
        requirement=requirement,
        placement=placement,
        checks=checks,
    )
