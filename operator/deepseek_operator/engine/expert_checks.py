"""Checks on how the experts spread over the GPUs: the sizes and expert counts MegaMoE and the
FusedMoE path divide over TP and EP, expert parallel itself, and vLLM's EPLB settings.

Each returns a :class:`~deepseek_operator.engine.checks.CheckResult` of category SPEC (or None
where no rule applies). The ``rule`` argument is the vLLM rule id the caller evaluates it for.
"""

from __future__ import annotations

from deepseek_operator.api.extra_args.eplb import redundant_experts
from deepseek_operator.api.rules.cross_field import VLLM_MEGA_MOE_REQUIRES_EP
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.catalog.vllm.rules import ReleaseRules
from deepseek_operator.engine.checks import (
    VLLM_DIMS_128,
    CheckCategory,
    CheckResult,
    check,
)
from deepseek_operator.engine.model_facts import ModelFacts

SPEC = CheckCategory.SPEC


def dimensions(
    facts: ModelFacts,
    spec: DeepSeekServingSpec,
    expert_parallel_size: int,
    rule: str,
    *,
    multiples_of_128: bool = True,
) -> CheckResult:
    """R7 / A5–A6: sizes are multiples of 128 (the native MegaMoE kernel's shape check) and the
    experts divide over the EP group (DP x PCP x TP in vLLM)."""
    ep = expert_parallel_size
    hidden, intermediate, experts = (
        facts.hidden_size,
        facts.moe_intermediate_size,
        facts.num_routed_experts,
    )
    if hidden is None or intermediate is None or experts is None:
        missing = [
            name
            for name, value in (
                ("hiddenSize", hidden),
                ("moeIntermediateSize", intermediate),
                ("numRoutedExperts", experts),
            )
            if value is None
        ]
        return check(
            "Dimensions",
            SPEC,
            rule,
            passed=False,
            message="model dimensions unknown: set spec.model." + ", spec.model.".join(missing),
        )
    problems: list[str] = []
    if multiples_of_128 and (hidden % 128 or intermediate % 128):
        problems.append(
            f"hidden {hidden} / MoE intermediate {intermediate} not multiples of 128 (vLLM: {VLLM_DIMS_128})"
        )
    # vLLM divides the physical experts (routed + EPLB redundant) over the EP group.
    redundant = redundant_experts(spec.engine.extra_args)
    if (experts + redundant) % ep:
        problems.append(
            f"n_physical_experts={experts + redundant} must be divisible by ep_size={ep}"
        )
    draft = facts.num_draft_routed_experts
    speculative = spec.engine.speculative_config is not None
    if speculative and draft is not None and (draft + redundant) % ep:
        problems.append(f"draft experts {draft + redundant} must be divisible by ep_size={ep}")
    detail = (
        f"hidden {hidden}, MoE intermediate {intermediate}, {experts} routed experts"
        + (f" + {redundant} redundant" if redundant else "")
        + f", EP size {ep}"
    )
    if speculative and draft is not None:
        detail += f", {draft} draft experts"
    if problems:
        return check(
            "Dimensions", SPEC, rule, passed=False, message=detail + ": " + "; ".join(problems)
        )
    return check(
        "Dimensions", SPEC, rule, passed=True, message=detail + ": multiples of 128 and divisible"
    )


def eplb_settings(spec: DeepSeekServingSpec) -> CheckResult | None:
    """E1: vLLM's ParallelConfig rules on EPLB (every backend, every release): redundant experts
    need EPLB; EPLB needs expert parallel and an EP group over TP, PCP or DP. None when neither
    EPLB nor redundant experts are asked for."""
    p = spec.parallelism
    redundant = redundant_experts(spec.engine.extra_args)
    if not p.enable_eplb and not redundant:
        return None
    if not p.enable_eplb:
        return check(
            "EPLBSettings",
            SPEC,
            "E1",
            passed=False,
            message=f"spec.engine.extraArgs sets --eplb-config num_redundant_experts={redundant} but "
            "spec.parallelism.enableEplb is false. vLLM: num_redundant_experts is set to "
            f"{redundant} but EPLB is not enabled. Either enable EPLB or unset "
            "num_redundant_experts.",
        )
    if not p.expert_parallel:
        return check(
            "EPLBSettings",
            SPEC,
            "E1",
            passed=False,
            message="spec.parallelism.enableEplb is true but expertParallel is false. vLLM: "
            "enable_expert_parallel must be True to use EPLB.",
        )
    group = p.tensor_parallel_size * p.prefill_context_parallel_size * p.data_parallel_size
    if group <= 1:
        return check(
            "EPLBSettings",
            SPEC,
            "E1",
            passed=False,
            message="vLLM: EPLB requires tensor, prefill-context, or data parallelism, but got "
            f"TP={p.tensor_parallel_size}, PCP={p.prefill_context_parallel_size}, "
            f"DP={p.data_parallel_size}.",
        )
    return check(
        "EPLBSettings",
        SPEC,
        "E1",
        passed=True,
        message=f"EPLB on with expert parallel over {group} GPUs (TP x PCP x DP)"
        + (f", {redundant} redundant experts" if redundant else ""),
    )


def fused_experts(
    rules: ReleaseRules, facts: ModelFacts, spec: DeepSeekServingSpec
) -> CheckResult | None:
    """E2: vLLM's FusedMoE path (every backend that is not a MegaMoE path of this release, and
    auto): the physical experts (routed + redundant) divide over the TP group (0.30.0 only: an
    assert in ``_init_fused_moe_experts``) and, with EPLB, evenly over the EP group
    (``FusedMoEFactory``). None when no rule applies."""
    p = spec.parallelism
    if not rules.fused_experts_divide_tp and not p.enable_eplb:
        return None
    experts = facts.num_routed_experts
    if experts is None:
        return None  # unknown experts: the model checks say so; nothing to divide here
    redundant = redundant_experts(spec.engine.extra_args)
    ep_group = (
        p.tensor_parallel_size * p.prefill_context_parallel_size * p.data_parallel_size
        if p.expert_parallel
        else 1
    )
    problems: list[str] = []
    counts = [experts]
    draft = facts.num_draft_routed_experts
    if spec.engine.speculative_config is not None and draft is not None:
        counts.append(draft)
    for count in counts:
        physical = count + redundant
        if rules.fused_experts_divide_tp and physical % p.tensor_parallel_size:
            problems.append(
                f"n_physical_experts={physical} must be divisible by "
                f"tp_size={p.tensor_parallel_size}"
            )
        if p.enable_eplb and ep_group > 1 and physical % ep_group:
            problems.append(
                f"EPLB currently only supports even distribution of experts across ranks. Got "
                f"{physical} experts and {ep_group} EP ranks"
            )
    detail = f"{experts} routed" + (f" + {redundant} redundant" if redundant else "") + " experts"
    if problems:
        return check(
            "FusedMoEExperts",
            SPEC,
            "E2",
            passed=False,
            message=f"{detail}. vLLM {rules.release} (FusedMoE): "
            + "; ".join(dict.fromkeys(problems)),
        )
    return check(
        "FusedMoEExperts", SPEC, "E2", passed=True, message=f"{detail}: divide over TP and EP"
    )


def expert_parallel(
    spec: DeepSeekServingSpec, expert_parallel_size: int, rule: str, need_two: bool
) -> CheckResult:
    """R8 / A1: expert parallel is on (and, for auto, the EP group has at least 2 GPUs)."""
    ep = expert_parallel_size
    if not spec.parallelism.expert_parallel:
        return check(
            "ExpertParallel",
            SPEC,
            rule,
            passed=False,
            message="expert parallel is off. vLLM: " + VLLM_MEGA_MOE_REQUIRES_EP,
        )
    if need_two and ep < 2:
        return check(
            "ExpertParallel",
            SPEC,
            rule,
            passed=False,
            message=f"EP size {ep} (TP x DP): a local EP group needs at least 2 GPUs",
        )
    return check(
        "ExpertParallel",
        SPEC,
        rule,
        passed=True,
        message=f"expert parallel on, EP size {ep} (TP x DP)",
    )
