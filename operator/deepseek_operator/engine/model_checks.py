"""Checks on the checkpoint's facts: the DeepSeek V4.1 architecture, expert dtype, routing and
top-k rules, and an explicit non-MegaMoE backend against the MXFP4 oracle's map.

Each returns a :class:`~deepseek_operator.engine.checks.CheckResult` of category SPEC. The
``rule`` argument is the vLLM rule id the caller evaluates it for (the same check mirrors an
auto rule R* and an explicit-backend guard A*).
"""

from __future__ import annotations

from deepseek_operator.api.backends import MXFP4_EXPLICIT_BACKENDS
from deepseek_operator.catalog.models import V4_ARCH, V41_ARCH
from deepseek_operator.engine.checks import (
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
