"""The cross-field spec rules: the MoE backend against the parallel layout, sizes that divide.

Each is a :class:`~.rule.SpecRule` (CEL in the CRD, the same predicate in the loader, one
message). Only rules that need nothing but the spec live in this package; anything that depends
on nodes or on catalog facts is a status condition, never an admission error. The ordered table
of every rule is :data:`.check.SPEC_RULES`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from deepseek_operator.api.backends import (
    EPLB_REFUSED_BACKENDS,
    MEGA_MOE_BACKENDS,
    MOE_BACKENDS,
)
from deepseek_operator.api.rules.rule import (
    NORMALIZED_BACKEND_CEL,
    SpecRule,
    cel_list,
    cel_no_gpu_resource,
    cel_or_default,
    sets_gpu_resource,
)
from deepseek_operator.api.spec import DeepSeekServingSpec

# vLLM's own words (docs/decision-rules.md); the MegaMoE guard A1.
VLLM_MEGA_MOE_REQUIRES_EP = (
    "DeepSeek V4 MegaMoE currently requires expert parallel. Enable it with "
    "--enable-expert-parallel, or pick a different moe backend."
)


def _dp_local_divides(spec: DeepSeekServingSpec) -> bool:
    p = spec.parallelism
    if p.data_parallel_size_local is None:
        return True
    local = p.data_parallel_size_local
    return local <= p.data_parallel_size and p.data_parallel_size % local == 0


def _where_set(
    name: str,
    scope: str,
    field: str,
    *,
    cel: str,
    holds: Callable[[DeepSeekServingSpec], bool],
    message: str,
    value: Callable[[DeepSeekServingSpec], Any],
) -> SpecRule:
    """A rule on the optional field ``field`` of the schema node ``scope``: unset, it passes;
    set, ``cel`` must hold in the CRD and ``holds`` on the parsed spec (where an unset field
    reads as its default, so ``holds`` must pass the default)."""
    return SpecRule(
        name=name,
        scope=scope,
        field_path=f".{field}",
        cel=f"!has(self.{field}) || {cel}",
        message=message,
        holds=holds,
        value=value,
    )


def _backend_requires(
    name: str,
    backends: frozenset[str],
    field_path: str,
    *,
    cel: str,
    holds: Callable[[DeepSeekServingSpec], bool],
    message: str,
    value: Callable[[DeepSeekServingSpec], Any],
) -> SpecRule:
    """A rule only the MoE ``backends`` impose: where spec.moeBackend (normalised as vLLM does)
    is one of them, ``cel`` holds in the CRD and ``holds`` on the parsed spec."""
    return SpecRule(
        name=name,
        scope="spec",
        field_path=field_path,
        cel=(
            f"!has(self.moeBackend) || !({NORMALIZED_BACKEND_CEL} in {cel_list(backends)}) || {cel}"
        ),
        message=message,
        holds=lambda s: s.moe_backend not in backends or holds(s),
        value=value,
    )


_DP_SIZE = cel_or_default("self.dataParallelSize", "1")
_TP_SIZE = cel_or_default("self.tensorParallelSize", "1")

CROSS_FIELD_RULES: tuple[SpecRule, ...] = (
    _where_set(
        "KnownMoEBackend",
        "spec",
        "moeBackend",
        cel=f"{NORMALIZED_BACKEND_CEL} in {cel_list(MOE_BACKENDS)}",
        holds=lambda s: s.moe_backend in MOE_BACKENDS,
        message=(
            "spec.moeBackend must be 'auto' or one of vLLM's MoE backends ("
            + ", ".join(MOE_BACKENDS[1:])
            + "); case and '-' are normalised as vLLM does"
        ),
        value=lambda s: s.moe_backend_as_written,
    ),
    _backend_requires(
        "MegaMoERequiresExpertParallel",
        MEGA_MOE_BACKENDS,
        ".moeBackend",
        cel=(
            "(has(self.parallelism) && has(self.parallelism.expertParallel)"
            " && self.parallelism.expertParallel)"
        ),
        holds=lambda s: s.parallelism.expert_parallel,
        message=(
            "spec.moeBackend is a MegaMoE backend ("
            + ", ".join(sorted(MEGA_MOE_BACKENDS))
            + "), which requires spec.parallelism.expertParallel: true. vLLM: "
            + VLLM_MEGA_MOE_REQUIRES_EP
        ),
        value=lambda s: s.moe_backend_as_written,
    ),
    _backend_requires(
        "FlashInferMoEEPRejectsEPLB",
        EPLB_REFUSED_BACKENDS,
        ".parallelism.enableEplb",
        cel=(
            "!has(self.parallelism) || !has(self.parallelism.enableEplb)"
            " || !self.parallelism.enableEplb"
        ),
        holds=lambda s: not s.parallelism.enable_eplb,
        message=(
            "spec.parallelism.enableEplb must be false with spec.moeBackend "
            + " or ".join(sorted(EPLB_REFUSED_BACKENDS))
            + ": vLLM: EPLB is not supported with these FlashInfer moe_ep backends. Use "
            "moe_backend=deep_gemm_mega_moe to run the mega path with EPLB."
        ),
        value=lambda s: s.parallelism.enable_eplb,
    ),
    _where_set(
        "DataParallelSizeLocalDividesDataParallelSize",
        "spec.parallelism",
        "dataParallelSizeLocal",
        cel=(
            f"(self.dataParallelSizeLocal <= {_DP_SIZE} && "
            f"{_DP_SIZE} % self.dataParallelSizeLocal == 0)"
        ),
        holds=_dp_local_divides,
        message=(
            "spec.parallelism.dataParallelSizeLocal must be at most and divide "
            "spec.parallelism.dataParallelSize"
        ),
        value=lambda s: s.parallelism.data_parallel_size_local,
    ),
    _where_set(
        "DecodeContextParallelSizeDividesTensorParallelSize",
        "spec.parallelism",
        "decodeContextParallelSize",
        cel=f"{_TP_SIZE} % self.decodeContextParallelSize == 0",
        holds=lambda s: (
            s.parallelism.tensor_parallel_size % s.parallelism.decode_context_parallel_size == 0
        ),
        message=(
            "spec.parallelism.decodeContextParallelSize must divide "
            "spec.parallelism.tensorParallelSize"
        ),
        value=lambda s: s.parallelism.decode_context_parallel_size,
    ),
    _where_set(
        "GPUResourceIsDerived",
        "spec",
        "resources",
        cel=f"({cel_no_gpu_resource('self.resources')})",
        holds=lambda s: not sets_gpu_resource(s, s.resources),
        message=(
            "spec.resources must not set the GPU resource (spec.gpuResourceName): the operator "
            "derives the GPU limit from the parallelism (TP x PP x local DP x PCP)"
        ),
        value=lambda s: s.gpu_resource_name,
    ),
)
"""The cross-field rules, in the order they are checked."""
