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
from deepseek_operator.engine import capacity, node_checks, spec_checks
from deepseek_operator.engine.checks import (
    VLLM_SM100_ONLY,
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
    backend_name,
    choose_release,
    extra_args_in_release,
    multi_node_executor,
    prefill_context_parallel,
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
    rep = capacity.report(
        spec, inputs.facts, inputs.release.version, mega, gpus, with_other=spec.moe_backend == AUTO
    )
    passed, message = capacity.kv_cache_check(rep)
    result = check(capacity.KV_CACHE_CAPACITY, CheckCategory.FIT, "", passed, message)
    checks = (*res.checks, result)
    res = dataclasses.replace(res, checks=checks, capacity=rep)
    # A coarser failure already decided (GPUMemory's recipe minimum): it stays the reason.
    earlier_fit = any(c.category is CheckCategory.FIT for c in res.failed_checks[:-1])
    if passed or not res.backend_runnable or earlier_fit:
        return res
    name = capacity.KV_CACHE_CAPACITY
    if spec.moe_backend == AUTO and mega:
        fused = capacity.CapacityReport(False, rep.other, rep.rows, "", rep.min_requests)
        if fused.holding:
            any_gpu = inputs.requirement(Requirement.ANY_GPU)
            kept = (
                f"auto kept (vLLM chooses its FusedMoE backend): {name} failed: {message}; "
                f"the FusedMoE path holds it: {capacity.kv_cache_check(fused)[1]}"
            )
            fused_check = check(name, CheckCategory.FIT, "", True, kept)
            out = inputs.resolution(
                AUTO,
                failed_reason(name),
                kept,
                True,
                any_gpu,
                inputs.place(any_gpu),
                (*res.checks, fused_check),
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
        False,
        requirement,
        inputs.place(requirement),
        checks,
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
    """The checks that hold or fail whatever the nodes: the release, its backend names, and the
    release's guards that refuse a layout for every backend."""
    checks = [release_check(inputs.release)]
    rules = inputs.release.rules
    if rules is None:
        return checks
    checks.append(backend_name(rules, backend))
    for guard in (
        prefill_context_parallel(rules, inputs.facts, inputs.spec, backend),
        multi_node_executor(rules, inputs.spec, inputs.layout.pods_per_replica),
        extra_args_in_release(rules, inputs.spec),
        spec_checks.eplb_settings(inputs.spec),
    ):
        if guard is not None:
            checks.append(guard)
    return checks


def _fused_moe_checks(inputs: DecisionInputs) -> list[CheckResult]:
    """The FusedMoE path's expert checks (every backend that is not a MegaMoE path, and auto)."""
    rules = inputs.release.rules
    assert rules is not None
    fused = spec_checks.fused_experts(rules, inputs.facts, inputs.spec)
    return [fused] if fused is not None else []


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
        backend, failed_reason(first.name), message, False, requirement, placement, checks
    )


def _memory_check(inputs: DecisionInputs) -> CheckResult:
    # Memory alone: a node outside every NVLink clique is left out by the clique check, not here.
    requirement = dataclasses.replace(inputs.requirement(Requirement.ANY_GPU), clique_key=None)
    facts, gpus_per_replica = inputs.facts, inputs.layout.gpus_per_replica
    # What gpu_memory reads of the facts: the minimum and where it came from.
    key = (
        "gpu_memory",
        requirement,
        facts.vram_minimum_gb,
        facts.source("vram_minimum_gb"),
        gpus_per_replica,
    )
    return inputs.over_candidates(
        key,
        lambda: node_checks.gpu_memory(inputs.candidates, requirement, facts, gpus_per_replica),
    )


def _gpu_architecture(inputs: DecisionInputs, rule: str, vllm_msg: str = "") -> CheckResult:
    # inputs.excluded is a function of the candidates' key, so the shared result stays right.
    return inputs.over_candidates(
        ("gpu_architecture", rule, vllm_msg),
        lambda: node_checks.gpu_architecture(
            inputs.candidates, rule, vllm_msg, excluded=inputs.excluded
        ),
    )


def _nvlink_fully_connected(inputs: DecisionInputs) -> CheckResult:
    """R14 over the SM100 candidates and the MegaMoE placement, NVLink alone: a node kept out
    by its memory label is the GPUMemory check's to report, so an unreadable memory label never
    reads as an NVLink failure."""
    requirement = dataclasses.replace(
        inputs.requirement(Requirement.MEGA_MOE), min_gpu_memory_mib=0
    )
    gpus_per_pod = inputs.layout.gpus_per_pod
    return inputs.over_candidates(
        ("nvlink_fully_connected", requirement, gpus_per_pod),
        lambda: node_checks.nvlink_fully_connected(
            inputs.sm100_candidates, inputs.place(requirement), gpus_per_pod
        ),
    )


def _not_eligible_note(inputs: DecisionInputs, requirement: NodeRequirement) -> str:
    """The SM100 candidates that ``requirement``'s placement leaves out."""
    return inputs.over_candidates(
        ("not_eligible_note", requirement, inputs.layout.gpus_per_pod),
        lambda: node_checks.not_eligible_note(inputs.sm100_candidates, inputs.place(requirement)),
    )


def _decide_auto(inputs: DecisionInputs) -> Resolution:
    spec, facts, layout = inputs.spec, inputs.facts, inputs.layout
    ep = layout.expert_parallel_size
    mega_requirement = inputs.requirement(Requirement.MEGA_MOE)
    mega_placement = inputs.place(mega_requirement)
    checks = [
        *_release_checks(inputs, AUTO),
        spec_checks.model_architecture(facts),
        _gpu_architecture(inputs, "R3"),
        spec_checks.deep_gemm(spec),
        spec_checks.expert_dtype(facts, "R5"),
        spec_checks.routing(facts, "R6"),
        spec_checks.dimensions(facts, spec, ep, "R7"),
        spec_checks.expert_parallel(spec, ep, "R8", need_two=True),
        *spec_checks.layout_rules(spec),
        _nvlink_fully_connected(inputs),
        _memory_check(inputs),
        node_checks.capacity(mega_placement, spec.replicas, "MegaMoECapacity"),
    ]
    rules = inputs.release.rules
    if rules is not None and rules.norm_topk_prob_guard:
        checks.insert(-2, spec_checks.normalized_top_k(facts, "R6"))
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
            True,
            mega_requirement,
            mega_placement,
            checks,
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
            False,
            requirement,
            inputs.place(requirement),
            checks,
        )
    any_gpu = inputs.requirement(Requirement.ANY_GPU)
    message = f"auto kept (vLLM chooses its FusedMoE backend): {first.name} failed: {first.message}"
    # Remote DP never becomes MegaMoE under auto (R10); say what an explicit backend could do.
    message += _explicit_layout_hint(inputs)
    return inputs.resolution(
        AUTO,
        failed_reason(first.name),
        message,
        True,
        any_gpu,
        inputs.place(any_gpu),
        checks,
        condition_reason=REASON_KEPT_AUTO,
    )


def _decide_explicit_mega_moe(inputs: DecisionInputs, backend: str) -> Resolution:
    spec, facts, layout = inputs.spec, inputs.facts, inputs.layout
    rules = inputs.release.rules
    assert rules is not None
    p = spec.parallelism
    # vLLM's MoE EP group spans DP x PCP x TP.
    expert_group = layout.expert_parallel_size * (
        p.prefill_context_parallel_size if p.expert_parallel else 1
    )
    flashinfer = rules.is_flashinfer_moe_ep(backend)
    model_guards = rules.model_guards_apply(backend)
    node_requirement = inputs.requirement(Requirement.SM100)
    checks = _release_checks(inputs, backend)
    if model_guards:
        checks.append(
            spec_checks.expert_parallel(spec, layout.expert_parallel_size, "A1", need_two=False)
        )
        checks.append(spec_checks.routing(facts, "A2"))
        if rules.norm_topk_prob_guard:
            checks.append(spec_checks.normalized_top_k(facts, "A2"))
    elif flashinfer and rules.flashinfer_needs_ep_group:
        checks.append(spec_checks.flashinfer_expert_parallel(spec, expert_group))
    checks.append(spec_checks.expert_dtype(facts, "A3"))
    if flashinfer:
        checks.append(
            inputs.over_candidates(
                ("flashinfer_capability", rules.data.flashinfer_moe_ep_capabilities, backend),
                lambda: node_checks.flashinfer_capability(
                    inputs.candidates, rules.data.flashinfer_moe_ep_capabilities, backend
                ),
            )
        )
    else:
        checks.append(_gpu_architecture(inputs, "A4", VLLM_SM100_ONLY))
    if model_guards:
        checks.append(
            spec_checks.dimensions(
                facts, spec, expert_group, "A5/A6", multiples_of_128=not flashinfer
            )
        )
    else:
        checks += _fused_moe_checks(inputs)  # a FlashInfer moe_ep kernel on the FusedMoE path
    if backend in rules.data.flashinfer_moe_ep_architecture_checked:
        checks.append(spec_checks.flashinfer_architecture(rules, facts, backend))
    if backend in rules.flashinfer_eplb_refused:
        checks.append(spec_checks.flashinfer_eplb(rules, spec, backend))
    if flashinfer and rules.flashinfer_refuses_dbo:
        checks.append(spec_checks.flashinfer_microbatching(rules, spec, backend))
    checks.append(spec_checks.cuda_platform(spec, "A10"))
    checks.append(_memory_check(inputs))
    one_nvlink_domain = layout.pods_per_replica > 1 and rules.needs_one_nvlink_domain(backend)
    if one_nvlink_domain:
        # Across nodes the EP group's in-kernel all-to-all needs NVLink between every rank.
        checks.append(
            node_checks.nvlink_clique(inputs.place(node_requirement), inputs.clique_key, "A11")
        )
    # A spec guard no node can satisfy pins the pods to no node; a node guard pins to its nodes.
    spec_failures = [c for c in failed(checks) if c.category is CheckCategory.SPEC]
    if spec_failures:
        requirement = inputs.requirement(Requirement.NONE, spec_failures[0].name)
    elif one_nvlink_domain and inputs.clique_key is None:
        requirement = inputs.requirement(Requirement.NONE, "NVLinkClique")
    else:
        requirement = node_requirement
    placement = inputs.place(requirement)
    nvlink = _nvlink_fully_connected(inputs)
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
            backend, failed_reason(first.name), message, False, requirement, placement, checks
        )
    message = (
        f"explicit {backend} kept; vLLM's MegaMoE guards hold on {len(placement.eligible)} node(s)"
    )
    return inputs.resolution(
        backend, REASON_EXPLICIT, message, True, requirement, placement, checks
    )


def _decide_explicit_other(inputs: DecisionInputs, backend: str) -> Resolution:
    guards = [spec_checks.explicit_backend(inputs.facts, backend), *_fused_moe_checks(inputs)]
    release = _release_checks(inputs, backend)
    guard_failures = failed(guards)
    if guard_failures:
        guard = guard_failures[0]
        requirement = inputs.requirement(Requirement.NONE, guard.name)
        placement = inputs.place(requirement)
        checks = [*release, *guards, node_checks.capacity(placement, inputs.spec.replicas)]
        message = f"explicit {backend} cannot run: {guard.message}"
        return inputs.resolution(
            backend, failed_reason(guard.name), message, False, requirement, placement, checks
        )
    requirement = inputs.requirement(Requirement.ANY_GPU)
    placement = inputs.place(requirement)
    checks = [*release, *guards, node_checks.capacity(placement, inputs.spec.replicas)]
    return inputs.resolution(
        backend,
        REASON_EXPLICIT,
        f"explicit {backend} kept verbatim",
        True,
        requirement,
        placement,
        checks,
    )
