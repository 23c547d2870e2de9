"""Layout arithmetic of a spec: EP size, GPUs per pod, pods per replica, sequence parallelism.

Pure functions of the spec (and, for sequence parallelism, the rendered backend), as vLLM
computes them (docs/decision-rules.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from deepseek_operator.api.backends import MEGA_MOE_BACKENDS
from deepseek_operator.api.spec import DeepSeekServingSpec


def expert_parallel_size(spec: DeepSeekServingSpec) -> int:
    """EP size = TP × DP when expert parallel is on (vLLM ``--enable-expert-parallel``), else 1."""
    p = spec.parallelism
    return p.tensor_parallel_size * p.data_parallel_size if p.expert_parallel else 1


def gpus_per_pod(spec: DeepSeekServingSpec) -> int:
    """GPUs one pod requests: TP × PP × local DP × PCP (docs/design.md)."""
    p = spec.parallelism
    return (
        p.tensor_parallel_size
        * p.pipeline_parallel_size
        * p.dp_local
        * p.prefill_context_parallel_size
    )


def pods_per_replica(spec: DeepSeekServingSpec) -> int:
    """Pods in one serving replica: DP / local DP (1 unless remote DP is asked for)."""
    p = spec.parallelism
    return p.data_parallel_size // p.dp_local


def sequence_parallel(spec: DeepSeekServingSpec, backend: str) -> bool:
    """vLLM's ``_use_sequence_parallel`` for DeepSeek V4/V4.1 (docs/decision-rules.md)."""
    p = spec.parallelism
    return (
        p.pipeline_parallel_size == 1
        and p.expert_parallel
        and p.tensor_parallel_size > 1
        and (backend in MEGA_MOE_BACKENDS or p.data_parallel_size > 1)
    )


def min_gpu_memory_mib(vram_minimum_gb: int | None, gpus_per_replica: int) -> int:
    """Per-GPU memory (MiB) for ``vram_minimum_gb`` GB spread over a replica's GPUs; 0 = no check."""
    if not vram_minimum_gb:
        return 0
    return -(-vram_minimum_gb * 10**9 // (gpus_per_replica * 2**20))


@dataclass(frozen=True)
class Layout:
    """The layout numbers of one spec, computed once per decision."""

    expert_parallel_size: int
    gpus_per_pod: int
    pods_per_replica: int
    min_gpu_memory_mib: int  # per GPU; 0 = no memory check

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one serving replica holds over all its pods."""
        return self.gpus_per_pod * self.pods_per_replica


def layout_of(spec: DeepSeekServingSpec, vram_minimum_gb: int | None) -> Layout:
    """The :class:`Layout` of ``spec`` for a checkpoint needing ``vram_minimum_gb`` per replica."""
    per_pod, pods = gpus_per_pod(spec), pods_per_replica(spec)
    return Layout(
        expert_parallel_size=expert_parallel_size(spec),
        gpus_per_pod=per_pod,
        pods_per_replica=pods,
        min_gpu_memory_mib=min_gpu_memory_mib(vram_minimum_gb, per_pod * pods),
    )
