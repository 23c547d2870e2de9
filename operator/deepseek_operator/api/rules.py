"""The static spec rules: one definition, two enforcers.

Each :class:`SpecRule` carries a CEL expression (rendered into the CRD as an
``x-kubernetes-validations`` entry, so the API server rejects the CR) and a Python predicate
(run by the pydantic models, so the offline ``render`` rejects the same CR) with ONE message, so
both say the same words. Only rules that need nothing but the spec live here; anything that
depends on nodes or on catalog facts is a status condition, never an admission error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deepseek_operator.api.backends import (
    FLASHINFER_MOE_EP_BACKENDS,
    MEGA_MOE_BACKENDS,
    MOE_BACKENDS,
)

if TYPE_CHECKING:
    from deepseek_operator.api.spec import DeepSeekServingSpec

# vLLM's own words (vllm-rules.md §4); the MegaMoE guard A1.
VLLM_MEGA_MOE_REQUIRES_EP = (
    "DeepSeek V4 MegaMoE currently requires expert parallel. Enable it with "
    "--enable-expert-parallel, or pick a different moe backend."
)

# Flags the operator renders from typed fields; setting them again in extraArgs would make the
# last one win inside vLLM's argparse and silently undo the decision.
OWNED_FLAGS: tuple[str, ...] = (
    "--moe-backend",
    "--kernel-config.moe-backend",
    "--tensor-parallel-size",
    "-tp",
    "--pipeline-parallel-size",
    "-pp",
    "--data-parallel-size",
    "-dp",
    "--data-parallel-size-local",
    "-dpl",
    "--data-parallel-rank",
    "-dpn",
    "--data-parallel-start-rank",
    "-dpr",
    "--data-parallel-address",
    "-dpa",
    "--data-parallel-rpc-port",
    "-dpp",
    "--data-parallel-backend",
    "-dpb",
    "--headless",
    "--nnodes",
    "-n",
    "--node-rank",
    "-r",
    "--master-addr",
    "--master-port",
    "--enable-expert-parallel",
    "--no-enable-expert-parallel",
    "-ep",
    "--enable-eplb",
    "--decode-context-parallel-size",
    "-dcp",
    "--prefill-context-parallel-size",
    "-pcp",
    "--distributed-executor-backend",
    "--speculative-config",
    "-sc",
    "--enable-dbo",
    "--no-enable-dbo",
    "--ubatch-size",
    "--served-model-name",
    "--revision",
    "--port",
    "--host",
    "--max-model-len",
    "--kv-cache-dtype",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--enable-prefix-caching",
    "--no-enable-prefix-caching",
    "--tokenizer-mode",
    "--reasoning-parser",
    "--tool-call-parser",
    "--enable-auto-tool-choice",
    "--gpu-memory-utilization",
    "--trust-remote-code",
    "--block-size",
)


def _cel_list(values: tuple[str, ...] | frozenset[str]) -> str:
    ordered = sorted(values) if isinstance(values, frozenset) else list(values)
    return "[" + ", ".join(f"'{v}'" for v in ordered) + "]"


def _cel_set(values: tuple[str, ...]) -> str:
    """A CEL map literal used as a set: ``x in {...}`` costs O(1), a list costs O(n)."""
    return "{" + ", ".join(f"'{v}': true" for v in values) + "}"


_NORMALIZED_BACKEND = "self.moeBackend.lowerAscii().replace('-', '_')"


@dataclass(frozen=True)
class SpecRule:
    """A static cross-field rule enforced by CEL in the CRD and by pydantic offline."""

    name: str
    scope: str  # "spec", "spec.parallelism" or "spec.engine": the schema node the CEL runs on
    field_path: str  # JSON path of the offending field, relative to ``scope`` (CEL fieldPath)
    cel: str
    message: str
    holds: Callable[[DeepSeekServingSpec], bool]
    value: Callable[[DeepSeekServingSpec], Any]

    @property
    def full_path(self) -> str:
        """The offending field's path from the object root, e.g. ``spec.moeBackend``."""
        return self.scope + self.field_path


def _mega_requires_ep(spec: DeepSeekServingSpec) -> bool:
    return spec.moe_backend not in MEGA_MOE_BACKENDS or (spec.parallelism.expert_parallel)


def _known_backend(spec: DeepSeekServingSpec) -> bool:
    return spec.moe_backend in MOE_BACKENDS


def _fi_rejects_eplb(spec: DeepSeekServingSpec) -> bool:
    return spec.moe_backend not in FLASHINFER_MOE_EP_BACKENDS or (not spec.parallelism.enable_eplb)


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


def _flag_name(arg: str) -> str:
    # vLLM's parser treats '_' and '-' in flag names alike.
    return arg.split("=")[0].replace("_", "-")


def _owns(arg: str) -> bool:
    # Any mention of moe_backend (e.g. --kernel-config moe_backend=...) would override too.
    return _flag_name(arg) in OWNED_FLAGS or "moe_backend" in arg or "moe-backend" in arg


def _no_owned_flags(spec: DeepSeekServingSpec) -> bool:
    return not any(_owns(a) for a in spec.engine.extra_args)


def _first_owned_flag(spec: DeepSeekServingSpec) -> str:
    return next((a for a in spec.engine.extra_args if _owns(a)), "")


SPEC_RULES: tuple[SpecRule, ...] = (
    SpecRule(
        name="KnownMoEBackend",
        scope="spec",
        field_path=".moeBackend",
        cel=f"!has(self.moeBackend) || {_NORMALIZED_BACKEND} in {_cel_list(MOE_BACKENDS)}",
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
            f"!has(self.moeBackend) || !({_NORMALIZED_BACKEND} in {_cel_list(MEGA_MOE_BACKENDS)})"
            " || (has(self.parallelism) && has(self.parallelism.expertParallel)"
            " && self.parallelism.expertParallel)"
        ),
        message=(
            "spec.moeBackend is a MegaMoE backend (deep_gemm_mega_moe, "
            "flashinfer_moe_ep_mega_deep_gemm, flashinfer_moe_ep_mega_cutedsl), which requires "
            "spec.parallelism.expertParallel: true. vLLM: " + VLLM_MEGA_MOE_REQUIRES_EP
        ),
        holds=_mega_requires_ep,
        value=lambda s: s.moe_backend_as_written,
    ),
    SpecRule(
        name="FlashInferMoEEPRejectsEPLB",
        scope="spec",
        field_path=".parallelism.enableEplb",
        cel=(
            f"!has(self.moeBackend) || !({_NORMALIZED_BACKEND} in "
            f"{_cel_list(FLASHINFER_MOE_EP_BACKENDS)}) || !has(self.parallelism)"
            " || !has(self.parallelism.enableEplb) || !self.parallelism.enableEplb"
        ),
        message=(
            "spec.parallelism.enableEplb must be false with spec.moeBackend "
            "flashinfer_moe_ep_mega_deep_gemm or flashinfer_moe_ep_mega_cutedsl: vLLM: EPLB is "
            "not supported with the FlashInfer moe_ep backends. Use "
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
    SpecRule(
        name="ExtraArgsDoNotOverrideTypedFields",
        scope="spec.engine",
        field_path=".extraArgs",
        cel=(
            "!has(self.extraArgs) || self.extraArgs.all(a, "
            f"!(a.split('=')[0].replace('_', '-') in {_cel_set(OWNED_FLAGS)}) && "
            "!a.contains('moe_backend') && !a.contains('moe-backend'))"
        ),
        message=(
            "spec.engine.extraArgs must not set a flag the operator renders from a typed field "
            "(--moe-backend, parallelism, speculative decoding, ports and the typed engine "
            "flags); set the typed field instead"
        ),
        holds=_no_owned_flags,
        value=_first_owned_flag,
    ),
)


def rules_for_scope(scope: str) -> list[SpecRule]:
    """The rules whose CEL expression runs on the schema node at ``scope``."""
    return [r for r in SPEC_RULES if r.scope == scope]
