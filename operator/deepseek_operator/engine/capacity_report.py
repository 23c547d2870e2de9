"""The capacity report: one path's capacity on every candidate GPU type, the other path's for
the what-if line, and the ``KVCacheCapacity`` check and messages people read.

The figures come from :mod:`.capacity`. Pure: no clock, no environment, no Kubernetes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.catalog.geometry import find_geometry
from deepseek_operator.catalog.gpu_memory import GIB, MIB
from deepseek_operator.engine.capacity import Capacity, GpuType, Unknown, capacity
from deepseek_operator.engine.model_facts import ModelFacts


def gib(value: int | float) -> str:
    """Bytes as GiB with two decimals."""
    return f"{value / GIB:.2f}"


def breakdown(cap: Capacity) -> str:
    """'weights 70.13 GiB/GPU (…), buffer …, KV room …: N requests at L tokens' for people."""
    w = cap.weights
    parts = [f"weights {gib(w.total)} GiB/GPU"]
    extras = [
        (w.padding, "expert padding"),
        (w.retained_shared, "retained shared experts"),
        (w.replicated_shared, "replicated shared experts"),
    ]
    shown = [f"{gib(v)} {label}" for v, label in extras if v]
    if shown:
        parts[0] += f" (incl. {', '.join(shown)})"
    if cap.symmetric_buffer:
        parts.append(f"MegaMoE buffer {gib(cap.symmetric_buffer)} GiB")
    parts.append(f"allowance {gib(cap.allowance)} GiB")
    budget = "fixed KV budget" if cap.fixed_kv_budget else "KV room"
    parts.append(f"{budget} {gib(cap.kv_bytes)} GiB/GPU")
    return (
        f"{cap.gpu.product} ({cap.gpu.memory_bytes // MIB} MiB/GPU): "
        + ", ".join(parts)
        + f": {cap.concurrent_requests:.2f} request(s) at {cap.max_model_len} tokens, "
        f"{cap.tokens} tokens in cache"
    )


@dataclass(frozen=True)
class LayoutOption:
    """One TP / DP / EP split of the replica's GPUs on one GPU type and what it holds (the
    layout advice of engine/layout_advice.py)."""

    tensor_parallel: int
    data_parallel: int
    expert_parallel: bool
    gpu_product: str
    concurrent_requests: float  # at maxModelLen, over the replica's DP ranks
    kv_layout: str  # whose KV groups (V4.1: the attention class this layout implies)
    chosen: bool  # the user's own layout

    @property
    def name(self) -> str:
        """'TP1 x DP8 + EP' for people."""
        ep = " + EP" if self.expert_parallel else ""
        return f"TP{self.tensor_parallel} x DP{self.data_parallel}{ep}"

    @property
    def fields(self) -> str:
        """The spec fields that pick this layout."""
        return (
            f"parallelism.tensorParallelSize {self.tensor_parallel}, dataParallelSize "
            f"{self.data_parallel}, expertParallel {str(self.expert_parallel).lower()}"
        )


KV_CACHE_CAPACITY = "KVCacheCapacity"
MEGA_MOE_PATH = "deep_gemm_mega_moe"
FUSED_MOE_PATH = "FusedMoE"


@dataclass(frozen=True, kw_only=True)
class CapacityReport:
    """The capacity of a decided backend on each GPU type, and the other path's for comparison."""

    mega_moe: bool
    rows: tuple[Capacity, ...]
    other: tuple[Capacity, ...] = ()  # the path auto would otherwise take (auto only)
    unknown: str = ""  # why no figures: the geometry, a fact or the GPU memory is unknown
    min_requests: int = 1  # what every row is held to: spec.capacity.minConcurrentRequests or 1
    refused: str = ""  # a spec the model refuses outright (maxModelLen beyond the checkpoint's)
    # The layouts of the same GPUs the decision rules accept, best first (engine/layout_advice.py).
    layouts: tuple[LayoutOption, ...] = ()

    @property
    def path(self) -> str:
        """The backend path the rows are for."""
        return MEGA_MOE_PATH if self.mega_moe else FUSED_MOE_PATH

    @property
    def holding(self) -> tuple[Capacity, ...]:
        """The GPU types that hold ``min_requests`` requests at maxModelLen."""
        return tuple(r for r in self.rows if r.concurrent_requests >= self.min_requests)

    @property
    def holds(self) -> bool:
        """Some GPU type holds the asked requests (true when nothing can be said)."""
        if self.refused:
            return False
        return bool(self.unknown) or not self.rows or bool(self.holding)


def path_rows(
    spec: DeepSeekServingSpec,
    facts: ModelFacts,
    release: str,
    mega_moe: bool,
    gpus: Sequence[GpuType],
) -> tuple[tuple[Capacity, ...], str]:
    """The capacity of ``spec`` on every GPU type in ``gpus`` for one path, or () and why no
    figures are known."""
    out: list[Capacity] = []
    for gpu in gpus:
        cap = capacity(spec, facts, release, mega_moe, gpu)
        if isinstance(cap, Unknown):
            return (), cap.reason
        out.append(cap)
    return tuple(out), ""


def report(
    spec: DeepSeekServingSpec,
    facts: ModelFacts,
    release: str,
    mega_moe: bool,
    gpus: Sequence[GpuType],
    with_other: bool = False,
) -> CapacityReport:
    """The capacity of ``spec`` on every GPU type in ``gpus`` for one path (and, with
    ``with_other``, the other path's figures for the what-if line)."""
    asked = spec.capacity.min_concurrent_requests or 1
    geometry = find_geometry(facts.name)
    wanted = spec.engine.max_model_len
    if geometry is not None and wanted is not None and wanted > geometry.max_model_len:
        refused = (
            f"spec.engine.maxModelLen {wanted} exceeds the checkpoint's {geometry.max_model_len} "
            "positions (max_position_embeddings); fix: lower engine.maxModelLen"
        )
        return CapacityReport(
            mega_moe=mega_moe, rows=(), other=(), unknown="", min_requests=asked, refused=refused
        )

    mine, unknown = path_rows(spec, facts, release, mega_moe, gpus)
    other = (
        path_rows(spec, facts, release, not mega_moe, gpus)[0] if with_other and not unknown else ()
    )
    if not unknown and not gpus:
        unknown = "no candidate node's GPU memory is known (agent or GFD memory label)"
    return CapacityReport(
        mega_moe=mega_moe, rows=mine, other=other, unknown=unknown, min_requests=asked
    )


def _fix(cap: Capacity) -> str:
    """What would make ``cap`` hold more: the levers the user has."""
    if cap.kv_bytes <= 0:
        return "more GPUs per replica (tensorParallelSize / dataParallelSize) or a GPU with more memory"
    return (
        "lower engine.maxModelLen or engine.maxNumBatchedTokens, raise gpuMemoryUtilization, "
        "or a DP layout (KV is replicated over TP, not over DP)"
    )


def kv_cache_check(rep: CapacityReport) -> tuple[bool, str]:
    """Whether the report's path holds the asked requests somewhere, and the one-line message."""
    if rep.refused:
        return False, rep.refused
    if rep.unknown:
        return True, f"capacity not computed: {rep.unknown}"
    best = max(rep.rows, key=lambda r: r.concurrent_requests)
    figures = "; ".join(breakdown(r) for r in rep.rows[:3])
    ask = (
        f"spec.capacity.minConcurrentRequests {rep.min_requests}"
        if rep.min_requests > 1
        else "one request"
    )
    if rep.holding:
        return True, f"{rep.path}: {figures}"
    return False, (
        f"{rep.path} cannot hold {ask} at maxModelLen {best.max_model_len} on any candidate GPU "
        f"type: {figures}; fix: {_fix(best)}"
    )


def what_if(rep: CapacityReport) -> str:
    """'MegaMoE leaves X GiB/GPU for KV, Y less than FusedMoE: N requests at L instead of M'."""
    if not rep.rows or not rep.other:
        return ""
    lines = []
    for mine, other in zip(rep.rows, rep.other, strict=True):
        mega, fused = (mine, other) if rep.mega_moe else (other, mine)
        less = fused.kv_bytes - mega.kv_bytes
        lines.append(
            f"{mine.gpu.product}: MegaMoE leaves {gib(mega.kv_bytes)} GiB/GPU for KV, "
            f"{gib(less)} less than the FusedMoE path: {mega.concurrent_requests:.2f} requests "
            f"at {mega.max_model_len} tokens instead of {fused.concurrent_requests:.2f}"
        )
    return "; ".join(lines)
