"""Checks of the FlashInfer moe_ep backends (A9): the architectures, EPLB, dual batch overlap
and expert-parallel layouts the release's FlashInfer kernels accept.

Each returns a :class:`~deepseek_operator.engine.checks.CheckResult` of category SPEC.
"""

from __future__ import annotations

from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.catalog.vllm.rules import ReleaseRules
from deepseek_operator.engine.checks import (
    CheckCategory,
    CheckResult,
    check,
)
from deepseek_operator.engine.model_facts import ModelFacts

SPEC = CheckCategory.SPEC


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
