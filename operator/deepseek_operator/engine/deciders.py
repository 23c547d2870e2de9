"""The backend deciders behind :func:`.decision.resolve`: ``auto`` (every check of
:data:`~.chains.AUTO_CHAIN` or it stays ``auto``), an explicit MegaMoE backend against vLLM's hard
guards (:data:`~.chains.MEGA_MOE_CHAIN`), any other explicit backend against the MXFP4 oracle's
map and the FusedMoE checks, and the release-wide refusal that comes before all of them.

Each returns the :class:`~.resolution.Resolution` and the placement its failing check pins the
pods to; every check is evaluated, so the status shows them all.
"""

from __future__ import annotations

from deepseek_operator.api.backends import AUTO, DEEP_GEMM_MEGA_MOE
from deepseek_operator.engine import model_checks, node_checks
from deepseek_operator.engine.chains import (
    AUTO_CHAIN,
    MEGA_MOE_CHAIN,
    RELEASE_CHAIN,
    ChainContext,
    fused_moe_checks,
    nvlink_fully_connected,
    run_chain,
)
from deepseek_operator.engine.checks import CheckCategory, CheckResult, failed, short_list
from deepseek_operator.engine.placement import NodeRequirement, Requirement
from deepseek_operator.engine.release import release_check
from deepseek_operator.engine.resolution import DecisionInputs, Resolution
from deepseek_operator.names import (
    REASON_EXPLICIT,
    REASON_KEPT_AUTO,
    REASON_MEGA_MOE_SELECTED,
    failed_reason,
)


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

    def evaluate() -> tuple[CheckResult, ...]:
        head = release_check(inputs.release)
        rules = inputs.release.rules
        if rules is None:
            return (head,)
        return (head, *run_chain(RELEASE_CHAIN, ChainContext(inputs, backend, rules)))

    return list(inputs.once(("release checks", backend), evaluate))


def _fused_moe_checks(inputs: DecisionInputs) -> list[CheckResult]:
    rules = inputs.release.rules
    assert rules is not None
    return fused_moe_checks(inputs, rules)


def release_refusal(inputs: DecisionInputs, backend: str) -> Resolution | None:
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


def decide_auto(inputs: DecisionInputs) -> Resolution:
    """``auto``: deep_gemm_mega_moe when every check holds, else auto kept (or refused when
    vLLM's FusedMoE path would not run either)."""
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


def decide_explicit_mega_moe(inputs: DecisionInputs, backend: str) -> Resolution:
    """An explicit MegaMoE backend, kept verbatim and checked against vLLM's hard guards."""
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


def decide_explicit_other(inputs: DecisionInputs, backend: str) -> Resolution:
    """Any other explicit backend: the MXFP4 oracle's map and the FusedMoE checks."""
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
