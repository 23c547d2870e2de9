"""Checks on the spec's layout and platform: DeepGEMM left on in the pod's environment, the
parallel layout rules R9–R13 and a CUDA platform — vLLM rules that no node can change.

The checkpoint's facts are checked in :mod:`.model_checks`, the experts' spread over the GPUs
in :mod:`.expert_checks` and the FlashInfer backends in :mod:`.flashinfer_checks`. Each returns a
:class:`~deepseek_operator.engine.checks.CheckResult` of category SPEC; the ``rule`` argument is
the vLLM rule id the caller evaluates it for.
"""

from __future__ import annotations

from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.engine.checks import (
    CheckCategory,
    CheckResult,
    check,
)

SPEC = CheckCategory.SPEC


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
