"""The KVCacheCapacity step of the decision: the capacity report joins a decided backend, and
decides whether auto keeps the FusedMoE path, an explicit backend is not placeable, or a path
that cannot hold one request at maxModelLen is refused before pods start.

The figures are :mod:`.capacity_report`'s; :func:`.decision.resolve` calls
:func:`with_capacity` last, after the backend chains of :mod:`.deciders`.
"""

from __future__ import annotations

import dataclasses

from deepseek_operator.api.backends import AUTO, DEEP_GEMM_MEGA_MOE
from deepseek_operator.engine import capacity, capacity_report
from deepseek_operator.engine.checks import CheckCategory, check
from deepseek_operator.engine.placement import Requirement
from deepseek_operator.engine.resolution import DecisionInputs, Resolution
from deepseek_operator.names import REASON_KEPT_AUTO, failed_reason


def with_capacity(inputs: DecisionInputs, res: Resolution, what_if: bool = True) -> Resolution:
    """The decision with its KVCacheCapacity check: auto keeps the FusedMoE path when MegaMoE
    cannot hold the asked requests but that path can; a path that cannot hold one request at
    maxModelLen is refused before pods start; an explicit backend short of
    ``spec.capacity.minConcurrentRequests`` is not placeable.

    ``what_if``: with auto, the report carries the other path's figures too (the status and
    ``render`` show them); without, they are computed only where the decision needs them."""
    spec = inputs.spec
    mega = res.moe_backend == DEEP_GEMM_MEGA_MOE
    eligible = res.placement.eligible

    def gpu_types() -> tuple[capacity.GpuType, ...]:
        chosen = set(eligible)
        nodes = [n for n in inputs.candidates if n.name in chosen]
        return capacity.gpu_types(nodes or list(inputs.candidates))

    # Keyed by the eligible names as the placement lists them (sorting 2,000 names per
    # decision cost more than the rest of this step).
    gpus = inputs.over_candidates(("capacity_gpu_types", eligible), gpu_types)
    release = inputs.release.version
    rep = capacity_report.report(
        spec, inputs.facts, release, mega, gpus, with_other=what_if and spec.moe_backend == AUTO
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
        other = rep.other
        if not what_if and not rep.unknown:  # computed now: the decision needs them here
            other = capacity_report.path_rows(spec, inputs.facts, release, False, gpus)[0]
        fused = capacity_report.CapacityReport(
            mega_moe=False,
            rows=other,
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
