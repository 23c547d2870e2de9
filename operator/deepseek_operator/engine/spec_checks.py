"""Checks on the spec and the checkpoint's facts: the vLLM rules that no node can change.

Each returns a :class:`~deepseek_operator.engine.checks.CheckResult` of category SPEC. The
``rule`` argument is the vLLM rule id the caller evaluates it for (the same check mirrors an
auto rule R* and an explicit-backend guard A*).
"""

from __future__ import annotations

from deepseek_operator.api.backends import MXFP4_EXPLICIT_BACKENDS
from deepseek_operator.api.eplb import redundant_experts
from deepseek_operator.api.rules import VLLM_MEGA_MOE_REQUIRES_EP
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.catalog.models import V4_ARCH, V41_ARCH
from deepseek_operator.catalog.vllm.rules import ReleaseRules
from deepseek_operator.engine.checks import (
    VLLM_DIMS_128,
    VLLM_SQRTSOFTPLUS_ONLY,
    CheckCategory,
    CheckResult,
    check,
)
from deepseek_operator.engine.model_facts import ModelFacts

SPEC = CheckCategory.SPEC


def model_architecture(facts: ModelFacts) -> CheckResult:
    """R2: the checkpoint is DeepSeek V4.1."""
    arch = facts.architecture
    if arch == V41_ARCH:
        return check(
            "ModelArchitecture",
            SPEC,
            "R2",
            passed=True,
            message=f"{arch} is DeepSeek V4.1 ({facts.source('architecture')})",
        )
    if arch == V4_ARCH:
        return check(
            "ModelArchitecture",
            SPEC,
            "R2",
            passed=False,
            message=f"{arch} is DeepSeek V4; automatic MegaMoE is scoped to V4.1 (vLLM PR #57220). "
            "The V4 recipe sets it explicitly on Blackwell: set spec.moeBackend: "
            "deep_gemm_mega_moe (with expertParallel) to use it",
        )
    if arch is None:
        return check(
            "ModelArchitecture",
            SPEC,
            "R2",
            passed=False,
            message=f"architecture unknown: {facts.name!r} is not in the catalog and "
            "spec.model.architecture is not set",
        )
    return check(
        "ModelArchitecture",
        SPEC,
        "R2",
        passed=False,
        message=f"{arch} is not DeepSeek V4.1 ({V41_ARCH})",
    )


def deep_gemm(spec: DeepSeekServingSpec) -> CheckResult:
    """R4: DeepGEMM is not turned off in the pod's environment."""
    raw = spec.env_value("VLLM_USE_DEEP_GEMM")
    declared = spec.declares_env("VLLM_USE_DEEP_GEMM")
    if declared and raw is None:
        return check(
            "DeepGEMM",
            SPEC,
            "R4",
            passed=False,
            message="VLLM_USE_DEEP_GEMM comes from valueFrom, so it cannot be verified before the pod starts",
        )
    if raw is not None and raw.strip() in ("0", "false", "False", ""):
        return check(
            "DeepGEMM",
            SPEC,
            "R4",
            passed=False,
            message=f"DeepGEMM disabled in spec.env (VLLM_USE_DEEP_GEMM={raw!r})",
        )
    shown = (
        f"VLLM_USE_DEEP_GEMM={raw!r}" if raw is not None else "VLLM_USE_DEEP_GEMM unset (default 1)"
    )
    return check(
        "DeepGEMM",
        SPEC,
        "R4",
        passed=True,
        message=f"DeepGEMM enabled: {shown}; the image must ship DeepGEMM (vLLM images do)",
    )


def expert_dtype(facts: ModelFacts, rule: str) -> CheckResult:
    """R5 / A3: the routed experts are fp4."""
    dtype = facts.expert_dtype
    if dtype == "fp4":
        return check(
            "ExpertDtype",
            SPEC,
            rule,
            passed=True,
            message=f"routed experts are fp4 (MXFP4) ({facts.source('expert_dtype')})",
        )
    if dtype is None:
        return check(
            "ExpertDtype",
            SPEC,
            rule,
            passed=False,
            message="expert dtype unknown: set spec.model.expertDtype",
        )
    return check(
        "ExpertDtype",
        SPEC,
        rule,
        passed=False,
        message=f"routed experts are {dtype} ({facts.source('expert_dtype')}). vLLM: DeepSeek V4 MegaMoE only supports fp4 experts; got expert_dtype={dtype!r}.",
    )


def routing(facts: ModelFacts, rule: str) -> CheckResult:
    """R6 / A2: the router scores with sqrtsoftplus."""
    func = facts.scoring_func
    if func == "sqrtsoftplus":
        return check(
            "Routing",
            SPEC,
            rule,
            passed=True,
            message=f"scoring function sqrtsoftplus ({facts.source('scoring_func')})",
        )
    if func is None:
        return check(
            "Routing",
            SPEC,
            rule,
            passed=False,
            message="scoring function unknown: set spec.model.scoringFunc",
        )
    return check(
        "Routing",
        SPEC,
        rule,
        passed=False,
        message=f"scoring function {func!r}. vLLM: {VLLM_SQRTSOFTPLUS_ONLY}",
    )


def normalized_top_k(facts: ModelFacts, rule: str) -> CheckResult:
    """A2 (vLLM 0.31+): the router renormalises its top-k probabilities."""
    value = facts.norm_topk_prob
    if value is None:
        return check(
            "NormTopkProb",
            SPEC,
            rule,
            passed=False,
            message="norm_topk_prob unknown: set spec.model.normTopkProb",
        )
    if value:
        return check(
            "NormTopkProb",
            SPEC,
            rule,
            passed=True,
            message=f"top-k probabilities renormalised ({facts.source('norm_topk_prob')})",
        )
    return check(
        "NormTopkProb",
        SPEC,
        rule,
        passed=False,
        message=f"norm_topk_prob false ({facts.source('norm_topk_prob')}). vLLM: DeepSeek V4 MegaMoE "
        "requires normalized top-k probabilities.",
    )


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


def layout_rules(spec: DeepSeekServingSpec) -> list[CheckResult]:
    """R9–R13: no PP/CP, all DP ranks local, not Ray, no speculative decoding, no microbatching."""
    p, e = spec.parallelism, spec.engine
    all_local = p.dp_local == p.data_parallel_size
    return [
        check(
            "NoPipelineOrContextParallel",
            SPEC,
            "R9",
            passed=p.pipeline_parallel_size == 1
            and p.decode_context_parallel_size == 1
            and p.prefill_context_parallel_size == 1,
            message=f"PP {p.pipeline_parallel_size}, DCP {p.decode_context_parallel_size}, PCP {p.prefill_context_parallel_size} (all must be 1)",
        ),
        check(
            "LocalDataParallel",
            SPEC,
            "R10",
            passed=all_local,
            message=f"DP {p.data_parallel_size}, DP local {p.dp_local}"
            + (" (all ranks in one pod)" if all_local else " (remote DP ranks)"),
        ),
        check(
            "NotRay",
            SPEC,
            "R11",
            passed=p.distributed_executor_backend != "ray",
            message=f"distributed executor backend {p.distributed_executor_backend}",
        ),
        check(
            "NoSpeculativeDecoding",
            SPEC,
            "R12",
            passed=e.speculative_config is None,
            message="speculative decoding off"
            if e.speculative_config is None
            else f"speculative decoding on ({e.speculative_config.get('method', 'unknown method')})",
        ),
        check(
            "NoMicrobatching",
            SPEC,
            "R13",
            passed=not e.enable_dbo and e.ubatch_size <= 1,
            message=f"enableDbo {str(e.enable_dbo).lower()}, ubatchSize {e.ubatch_size}",
        ),
    ]


def flashinfer_architecture(rules: ReleaseRules, facts: ModelFacts, backend: str) -> CheckResult:
    """A9: the release checks the model architecture of this FlashInfer moe_ep backend."""
    arch = facts.architecture
    allowed = rules.data.flashinfer_moe_ep_architectures
    supported = arch in allowed
    vllm = (
        f". vLLM: moe_backend={backend!r} is only supported for DeepSeek-V4 models "
        f"({sorted(allowed)}), but the model is [{arch!r}]."
    )
    return check(
        "FlashInferArchitecture",
        SPEC,
        "A9",
        passed=supported,
        message=f"architecture {arch} (vLLM {rules.release})" + ("" if supported else vllm),
    )


def flashinfer_eplb(rules: ReleaseRules, spec: DeepSeekServingSpec, backend: str) -> CheckResult:
    """A9: this FlashInfer moe_ep backend refuses EPLB in this release."""
    on = spec.parallelism.enable_eplb
    return check(
        "FlashInferEPLB",
        SPEC,
        "A9",
        passed=not on,
        message="EPLB off"
        if not on
        else f"EPLB on. vLLM {rules.release}: {backend} does not support EPLB "
        "(use deep_gemm_mega_moe to run the mega path with EPLB)",
    )


def flashinfer_microbatching(
    rules: ReleaseRules, spec: DeepSeekServingSpec, backend: str
) -> CheckResult:
    """The FlashInfer moe_ep kernels refuse dual batch overlap (releases that check it)."""
    on = spec.engine.enable_dbo
    return check(
        "FlashInferMicrobatching",
        SPEC,
        "A9",
        passed=not on,
        message="dual batch overlap off"
        if not on
        else f"enableDbo true. vLLM {rules.release}: {backend}: kernel does not support dual "
        "batch overlap",
    )


def flashinfer_expert_parallel(spec: DeepSeekServingSpec, expert_group: int) -> CheckResult:
    """The FlashInfer moe_ep kernels need an expert-parallel layer: EP on over 2+ GPUs."""
    ok = spec.parallelism.expert_parallel and expert_group > 1
    return check(
        "ExpertParallel",
        SPEC,
        "A1",
        passed=ok,
        message=f"expert parallel on over {expert_group} GPUs (DP x PCP x TP)"
        if ok
        else f"expert parallel {'on' if spec.parallelism.expert_parallel else 'off'}, "
        f"{expert_group} GPU(s) in the group. vLLM: the FlashInfer moe_ep kernel does not support "
        "a parallel config without expert parallel (EP over 2+ GPUs)",
    )


def cuda_platform(spec: DeepSeekServingSpec, rule: str) -> CheckResult:
    """A10: the GPUs are CUDA (ROCm turns MegaMoE off for V4.1)."""
    rocm = spec.gpu_resource_name.startswith("amd.com/")
    return check(
        "CUDAPlatform",
        SPEC,
        rule,
        passed=not rocm,
        message=f"GPU resource {spec.gpu_resource_name}"
        + (": ROCm, where DeepSeek V4.1 forces use_mega_moe=False" if rocm else " (CUDA)"),
    )


def explicit_backend(facts: ModelFacts, backend: str) -> CheckResult:
    """An explicit non-MegaMoE backend: the MXFP4 oracle's map for fp4 experts, else kept (R1)."""
    if facts.expert_dtype == "fp4":
        ok = backend in MXFP4_EXPLICIT_BACKENDS
        vllm = f"vLLM: moe_backend={backend!r} is not supported for MXFP4 MoE. Expected one of {sorted(MXFP4_EXPLICIT_BACKENDS)}."
        return check(
            "MXFP4Backend",
            SPEC,
            "oracle",
            passed=ok,
            message=f"{backend} is in the MXFP4 oracle's map" if ok else vllm,
        )
    return check("ExplicitBackend", SPEC, "R1", passed=True, message=f"{backend} kept verbatim")
