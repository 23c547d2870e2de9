"""The cross-field spec rules: the MoE backend against the parallel layout, sizes that divide.

Each is a :class:`~.rule.SpecRule` (CEL in the CRD, the same predicate in the loader, one
message). Only rules that need nothing but the spec live in this package; anything that depends
on nodes or on catalog facts is a status condition, never an admission error. The ordered table
of every rule is :data:`.check.SPEC_RULES`.
"""

from __future__ import annotations

from deepseek_operator.api.backends import (
    EPLB_REFUSED_BACKENDS,
    MEGA_MOE_BACKENDS,
    MOE_BACKENDS,
)
from deepseek_operator.api.rules.rule import NORMALIZED_BACKEND_CEL, SpecRule, cel_list
from deepseek_operator.api.spec import DeepSeekServingSpec

# vLLM's own words (docs/decision-rules.md); the MegaMoE guard A1.
VLLM_MEGA_MOE_REQUIRES_EP = (
    "DeepSeek V4 MegaMoE currently requires expert parallel. Enable it with "
    "--enable-expert-parallel, or pick a different moe backend."
)


def _mega_requires_ep(spec: DeepSeekServingSpec) -> bool:
    return spec.moe_backend not in MEGA_MOE_BACKENDS or (spec.parallelism.expert_parallel)


def _known_backend(spec: DeepSeekServingSpec) -> bool:
    return spec.moe_backend in MOE_BACKENDS


def _fi_rejects_eplb(spec: DeepSeekServingSpec) -> bool:
    return spec.moe_backend not in EPLB_REFUSED_BACKENDS or (not spec.parallelism.enable_eplb)


def _dp_local_divides(spec: DeepSeekServingSpec) -> bool:
    p = spec.parallelism
    if p.data_parallel_size_local is None:
        return True
    local = p.data_parallel_size_local
    return local <= p.data_parallel_size and p.data_parallel_size % local == 0


def _dcp_divides_tp(spec: DeepSeekServingSpec) -> bool:
    p = spec.parallelism
    return p.tensor_parallel_size % p.decode_context_parallel_size == 0


def _no_gpu_in_resources(spec: DeepSeekServingSpec) -> bool:
    r = spec.resources
    return spec.gpu_resource_name not in r.limits and spec.gpu_resource_name not in r.requests


CROSS_FIELD_RULES: tuple[SpecRule, ...] = (
    SpecRule(
        name="KnownMoEBackend",
        scope="spec",
        field_path=".moeBackend",
        cel=f"!has(self.moeBackend) || {NORMALIZED_BACKEND_CEL} in {cel_list(MOE_BACKENDS)}",
        message=(
            "spec.moeBackend must be 'auto' or one of vLLM's MoE backends ("
            + ", ".join(MOE_BACKENDS[1:])
            + "); case and '-' are normalised as vLLM does"
        ),
        holds=_known_backend,
        value=lambda s: s.moe_backend_as_written,
    ),
    SpecRule(
        name="MegaMoERequiresExpertParallel",
        scope="spec",
        field_path=".moeBackend",
        cel=(
            f"!has(self.moeBackend) || !({NORMALIZED_BACKEND_CEL} in {cel_list(MEGA_MOE_BACKENDS)})"
            " || (has(self.parallelism) && has(self.parallelism.expertParallel)"
            " && self.parallelism.expertParallel)"
        ),
        message=(
            "spec.moeBackend is a MegaMoE backend ("
            + ", ".join(sorted(MEGA_MOE_BACKENDS))
            + "), which requires spec.parallelism.expertParallel: true. vLLM: "
            + VLLM_MEGA_MOE_REQUIRES_EP
        ),
        holds=_mega_requires_ep,
        value=lambda s: s.moe_backend_as_written,
    ),
    SpecRule(
        name="FlashInferMoEEPRejectsEPLB",
        scope="spec",
        field_path=".parallelism.enableEplb",
        cel=(
            f"!has(self.moeBackend) || !({NORMALIZED_BACKEND_CEL} in "
            f"{cel_list(EPLB_REFUSED_BACKENDS)}) || !has(self.parallelism)"
            " || !has(self.parallelism.enableEplb) || !self.parallelism.enableEplb"
        ),
        message=(
            "spec.parallelism.enableEplb must be false with spec.moeBackend "
            + " or ".join(sorted(EPLB_REFUSED_BACKENDS))
            + ": vLLM: EPLB is not supported with these FlashInfer moe_ep backends. Use "
            "moe_backend=deep_gemm_mega_moe to run the mega path with EPLB."
        ),
        holds=_fi_rejects_eplb,
        value=lambda s: s.parallelism.enable_eplb,
    ),
    SpecRule(
        name="DataParallelSizeLocalDividesDataParallelSize",
        scope="spec.parallelism",
        field_path=".dataParallelSizeLocal",
        cel=(
            "!has(self.dataParallelSizeLocal) || (self.dataParallelSizeLocal <= "
            "(has(self.dataParallelSize) ? self.dataParallelSize : 1) && "
            "(has(self.dataParallelSize) ? self.dataParallelSize : 1) % "
            "self.dataParallelSizeLocal == 0)"
        ),
        message=(
            "spec.parallelism.dataParallelSizeLocal must be at most and divide "
            "spec.parallelism.dataParallelSize"
        ),
        holds=_dp_local_divides,
        value=lambda s: s.parallelism.data_parallel_size_local,
    ),
    SpecRule(
        name="DecodeContextParallelSizeDividesTensorParallelSize",
        scope="spec.parallelism",
        field_path=".decodeContextParallelSize",
        cel=(
            "!has(self.decodeContextParallelSize) || "
            "(has(self.tensorParallelSize) ? self.tensorParallelSize : 1) % "
            "self.decodeContextParallelSize == 0"
        ),
        message=(
            "spec.parallelism.decodeContextParallelSize must divide "
            "spec.parallelism.tensorParallelSize"
        ),
        holds=_dcp_divides_tp,
        value=lambda s: s.parallelism.decode_context_parallel_size,
    ),
    SpecRule(
        name="GPUResourceIsDerived",
        scope="spec",
        field_path=".resources",
        cel=(
            "!has(self.resources) || ("
            "(!has(self.resources.limits) || !((has(self.gpuResourceName) ? "
            "self.gpuResourceName : 'nvidia.com/gpu') in self.resources.limits)) && "
            "(!has(self.resources.requests) || !((has(self.gpuResourceName) ? "
            "self.gpuResourceName : 'nvidia.com/gpu') in self.resources.requests)))"
        ),
        message=(
            "spec.resources must not set the GPU resource (spec.gpuResourceName): the operator "
            "derives the GPU limit from the parallelism (TP x PP x local DP x PCP)"
        ),
        holds=_no_gpu_in_resources,
        value=lambda s: s.gpu_resource_name,
    ),
)
"""The cross-field rules, in the order they are checked."""
