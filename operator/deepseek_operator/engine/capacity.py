"""The capacity model: per GPU type, what one replica's weights, MegaMoE buffer and allowances
leave for the KV cache at ``gpuMemoryUtilization``, and how many requests at ``maxModelLen`` fit.

It follows how vLLM sizes the KV cache (vLLM 0.33.0's own code): requested memory is
``ceil(total x gpu_memory_utilization)``; the KV room is what the weights, the symmetric buffer
and the profiled activations / CUDA graphs leave of it (``--kv-cache-memory-bytes`` replaces it
with a fixed figure); a request at ``maxModelLen`` needs every full-attention record for all its
tokens and, per sliding-window record, ``min(W - 1 + in-flight tokens, maxModelLen)`` tokens,
where in-flight tokens are ``max_concurrent_batches x maxNumBatchedTokens``. Where the release's
own KV cache groups are known (V4-Flash, proven by conformance/capacity_check.py) this is vLLM's
block arithmetic on them (``kv_blocks``); elsewhere a per-token estimate. KV is not sharded
over TP (``max_tp_shards=1``): every TP rank holds the whole request, pipeline stages split the
layers, and each DP rank has its own pool, so DP layouts hold more requests than TP layouts of
the same GPU count. Pure: no clock, no environment, no Kubernetes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.catalog.capacity import (
    ACTIVATION_BYTES_PER_TOKEN_HIDDEN,
    BF16_KV_DTYPES,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    FIXED_OVERHEAD_BYTES,
    GIB,
    MIB,
    MTP_SUFFIX,
    PACKED_KV_DTYPES,
    PRODUCT_MEMORY_MIB,
    RELEASE_MEMORY,
    SYMMETRIC_BUFFER_BYTES_PER_ELEMENT,
    CapacityGeometry,
    KvGroup,
    KvLayerSpec,
    KvRecord,
    default_max_num_batched_tokens,
    find_geometry,
)
from deepseek_operator.engine.model_facts import ModelFacts
from deepseek_operator.nodes.facts import NodeFacts

# Bytes per stored expert element, and the block-scale bytes per element (MXFP4: one E8M0 byte
# per 32 values; FP8 [128, 128] blocks: one fp32 per 16384 values).
_EXPERT_BYTES = {"fp4": 0.5, "fp8": 1.0}
_EXPERT_SCALE_BYTES = {"fp4": 1 / 32, "fp8": 4 / 16384}


@dataclass(frozen=True)
class GpuType:
    """One kind of GPU a replica may land on: its product and memory per GPU."""

    product: str
    memory_bytes: int
    source: str  # the label it was read from, or the catalog


@dataclass(frozen=True)
class Weights:
    """Weight bytes per GPU, by component (the MegaMoE extras are zero on the FusedMoE path)."""

    routed: int  # routed experts and their block scales, as the checkpoint stores them
    shared: int  # shared experts as the FusedMoE path shards them over TP
    dense: int  # attention, norms, routers, embedding, LM head (sharded over TP)
    draft: int  # the speculative draft's layers
    padding: int = 0  # MegaMoE: routed experts padded to its intermediate multiple
    retained_shared: int = 0  # MegaMoE: the original shared weights kept beside the fused copy
    replicated_shared: int = 0  # MegaMoE: the shared expert replicated instead of TP-sharded

    @property
    def total(self) -> int:
        """All weight bytes on one GPU."""
        return (
            self.routed
            + self.shared
            + self.dense
            + self.draft
            + self.padding
            + self.retained_shared
            + self.replicated_shared
        )

    @property
    def mega_moe_extra(self) -> int:
        """What MegaMoE's layout adds over the FusedMoE path."""
        return self.padding + self.retained_shared + self.replicated_shared


def pool_concurrency(num_blocks: int, blocks_per_request: int) -> float:
    """vLLM's maximum concurrency of a block pool (``get_max_concurrency_for_kv_cache_config``),
    0 where it refuses to start: the pool keeps one null block, so one request needs
    ``blocks_per_request + 1`` blocks (``_check_enough_kv_cache_memory``)."""
    if num_blocks <= blocks_per_request:
        return 0.0
    return num_blocks / blocks_per_request


@dataclass(frozen=True)
class Capacity:
    """The KV room one replica leaves on one GPU type, and what it holds."""

    gpu: GpuType
    mega_moe: bool
    weights: Weights
    symmetric_buffer: int
    allowance: int  # activations, CUDA graphs, NCCL, CUDA context
    requested: int  # ceil(total x gpu_memory_utilization), or the fixed KV budget's share
    kv_bytes: int  # KV room per GPU (negative: the weights alone do not fit)
    fixed_kv_budget: bool
    per_request_bytes: int  # one request at maxModelLen, on one GPU of one DP rank
    dp_ranks: int
    max_model_len: int
    # vLLM's block pool where the release's KV groups are known (else None: per-token estimate).
    num_blocks: int | None = None
    blocks_per_request: int | None = None

    @property
    def requests_per_rank(self) -> float:
        """vLLM's "maximum concurrency" of one DP rank's engine at maxModelLen: num_blocks over the
        blocks one request takes, 0 where vLLM refuses to start (the pool keeps one null block)."""
        if self.num_blocks is not None and self.blocks_per_request is not None:
            return pool_concurrency(self.num_blocks, self.blocks_per_request)
        return max(self.kv_bytes, 0) / self.per_request_bytes

    @property
    def concurrent_requests(self) -> float:
        """Requests at maxModelLen one replica holds: every DP rank has its own pool."""
        return self.requests_per_rank * self.dp_ranks

    @property
    def tokens(self) -> int:
        """vLLM's "KV cache size" in tokens over the replica: concurrency x maxModelLen."""
        return int(self.concurrent_requests * self.max_model_len)


@dataclass(frozen=True)
class Unknown:
    """Why the capacity of a spec cannot be computed (named, never guessed)."""

    reason: str


def gib(value: int | float) -> str:
    """Bytes as GiB with two decimals."""
    return f"{value / GIB:.2f}"


def kv_family(kv_cache_dtype: str | None) -> str | None:
    """``packed`` or ``bf16`` for ``kvCacheDtype`` (None or auto: vLLM's packed default)."""
    dtype = (kv_cache_dtype or "auto").lower()
    if dtype in PACKED_KV_DTYPES:
        return "packed"
    if dtype in BF16_KV_DTYPES:
        return "bf16"
    return None


def kv_records(
    geometry: CapacityGeometry, kv_cache_dtype: str | None
) -> tuple[KvRecord, ...] | str:
    """The KV records for ``kvCacheDtype`` (None or auto: vLLM's packed default), or why not."""
    family = kv_family(kv_cache_dtype)
    if family is None:
        known = ", ".join(sorted(PACKED_KV_DTYPES | BF16_KV_DTYPES))
        return f"spec.engine.kvCacheDtype {kv_cache_dtype!r} has no known KV record size ({known})"
    return geometry.kv_records[family]


def kv_groups(geometry: CapacityGeometry, spec: DeepSeekServingSpec) -> tuple[KvGroup, ...] | None:
    """The release's KV cache groups for ``spec``'s kvCacheDtype and speculative method, or None
    where they are not known (the per-token estimate applies)."""
    family = kv_family(spec.engine.kv_cache_dtype)
    if geometry.kv_groups is None or family is None:
        return None
    draft = spec.engine.speculative_config
    if draft is None:
        return geometry.kv_groups.get(family)
    if draft.get("method") == "mtp":
        return geometry.kv_groups.get(family + MTP_SUFFIX)
    return None


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def layer_blocks_per_request(
    spec: KvLayerSpec, max_model_len: int, in_flight_tokens: int, dcp: int
) -> int:
    """Blocks one request at ``max_model_len`` takes of one layer spec (vLLM 0.33.0
    ``max_memory_usage_bytes`` / ``page_size_bytes`` of v1/kv_cache_interface.py)."""
    if spec.kind == "circular":
        return 1  # the ring occupies one block for the request's lifetime
    if spec.kind == "sliding":
        assert spec.window is not None
        tokens = min(spec.window - 1 + in_flight_tokens, max_model_len)
        # +1: the window need not start at a block boundary.
        return _cdiv(tokens, spec.block_size) + 1
    return _cdiv(_cdiv(max_model_len, dcp), spec.block_size)


def kv_blocks(
    groups: Sequence[KvGroup],
    kv_bytes: int,
    max_model_len: int,
    in_flight_tokens: int,
    pipeline_stages: int,
    dcp: int,
) -> tuple[int, int, int]:
    """vLLM's block pool for ``kv_bytes`` per GPU: (bytes per block, blocks per request at
    ``max_model_len``, number of blocks), as v1/core/kv_cache_planning.py and
    ``get_max_concurrency_for_kv_cache_config`` compute them.

    A block costs the largest group's page over all its layers (every group draws from one pool);
    a group's request takes the most blocks any of its layers needs; the groups add up.
    INFERRED for pipeline stages > 1 (not proven by conformance): each stage holds 1/PP of
    every group's layers.
    """
    bytes_per_block = _cdiv(max(g.page_bytes for g in groups), pipeline_stages)
    per_request = sum(
        max(
            layer_blocks_per_request(spec, max_model_len, in_flight_tokens, dcp)
            for spec, _ in g.layers
        )
        for g in groups
    )
    return bytes_per_block, per_request, max(kv_bytes, 0) // bytes_per_block


def max_concurrent_batches(spec: DeepSeekServingSpec) -> int:
    """vLLM's ``max_concurrent_batches``: 2 with async scheduling at PP 1, else the PP size."""
    pp = spec.parallelism.pipeline_parallel_size
    return 2 if pp == 1 else pp


def per_request_bytes(
    records: Sequence[KvRecord],
    max_model_len: int,
    in_flight_tokens: int,
    pipeline_stages: int,
    dcp: int,
) -> int:
    """KV bytes one request at ``max_model_len`` takes on one GPU of its DP rank."""
    total = 0
    for record in records:
        if record.circular_rows is not None:
            tokens = record.circular_rows
        elif record.window is not None:
            tokens = min(record.window - 1 + in_flight_tokens, max_model_len)
        else:
            # Full-attention records shard their token positions over decode context parallel.
            tokens = math.ceil(max_model_len / dcp)
        states = math.ceil(tokens / record.tokens_per_state)
        total += states * record.bytes_per_state * record.layers
    return math.ceil(total / pipeline_stages)


def weights_per_gpu(
    spec: DeepSeekServingSpec,
    facts: ModelFacts,
    geometry: CapacityGeometry,
    release: str,
    mega_moe: bool,
) -> Weights | str:
    """Weight bytes on one GPU of ``spec``'s layout for the MegaMoE or the FusedMoE path."""
    missing = [
        name
        for name in ("expert_dtype", "hidden_size", "moe_intermediate_size", "num_routed_experts")
        if getattr(facts, name) is None
    ]
    if missing:
        return f"spec.model lacks {', '.join(missing)}"
    assert facts.expert_dtype and facts.hidden_size and facts.moe_intermediate_size
    assert facts.num_routed_experts
    behaviour = RELEASE_MEMORY.get(release)
    if behaviour is None:
        return f"vLLM {release} has no known MegaMoE memory layout"
    p = spec.parallelism
    tp, pp = p.tensor_parallel_size, p.pipeline_parallel_size
    ep = tp * p.data_parallel_size if p.expert_parallel else 1
    layers = geometry.num_layers / pp
    hidden, inter = facts.hidden_size, facts.moe_intermediate_size
    per_elem = _EXPERT_BYTES[facts.expert_dtype] + _EXPERT_SCALE_BYTES[facts.expert_dtype]
    # With EP each rank holds n/EP whole experts; without it every expert is TP-sharded.
    routed_share = (1 / ep) if p.expert_parallel else (1 / tp)
    routed_elems = facts.num_routed_experts * 3 * hidden * inter * layers * routed_share
    routed = int(routed_elems * per_elem)
    shared_full = int(geometry.n_shared_experts * 3 * hidden * inter * layers)  # FP8, 1 B
    dense = int(geometry.dense_bytes / tp / pp)
    draft = 0
    if spec.engine.speculative_config is not None:
        draft_experts = facts.num_draft_routed_experts or facts.num_routed_experts
        draft = int(
            draft_experts * 3 * hidden * inter * geometry.draft_layers * routed_share * per_elem
        )
    if not mega_moe:
        return Weights(routed=routed, shared=shared_full // tp, dense=dense, draft=draft)
    multiple = behaviour.mega_moe_intermediate_multiple
    padded = -(-inter // multiple) * multiple if multiple else inter
    return Weights(
        routed=routed,
        shared=shared_full // tp,
        dense=dense,
        draft=draft,
        padding=int(routed * (padded - inter) / inter),
        retained_shared=shared_full if behaviour.mega_moe_retains_shared else 0,
        # MegaMoE's fused shared expert is whole on every rank (sequence parallel or TP 1).
        replicated_shared=shared_full - shared_full // tp,
    )


def capacity(
    spec: DeepSeekServingSpec,
    facts: ModelFacts,
    release: str,
    mega_moe: bool,
    gpu: GpuType,
) -> Capacity | Unknown:
    """The capacity of one replica of ``spec`` on ``gpu`` for the MegaMoE or the FusedMoE path."""
    geometry = find_geometry(facts.name)
    if geometry is None:
        return Unknown(f"no capacity geometry for checkpoint {facts.name!r}")
    weights = weights_per_gpu(spec, facts, geometry, release, mega_moe)
    if isinstance(weights, str):
        return Unknown(weights)
    records = kv_records(geometry, spec.engine.kv_cache_dtype)
    if isinstance(records, str):
        return Unknown(records)
    groups = kv_groups(geometry, spec)
    engine, p = spec.engine, spec.parallelism
    max_model_len = engine.max_model_len or geometry.max_model_len
    batched = engine.max_num_batched_tokens or default_max_num_batched_tokens(
        gpu.memory_bytes, gpu.product
    )
    assert facts.hidden_size is not None  # weights_per_gpu refused otherwise
    buffer = (
        batched * geometry.top_k * facts.hidden_size * SYMMETRIC_BUFFER_BYTES_PER_ELEMENT
        if mega_moe
        else 0
    )
    allowance = (
        FIXED_OVERHEAD_BYTES + batched * facts.hidden_size * ACTIVATION_BYTES_PER_TOKEN_HIDDEN
    )
    utilisation = engine.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION
    if engine.kv_cache_memory_bytes is not None:
        requested = weights.total + buffer + allowance + engine.kv_cache_memory_bytes
        kv = engine.kv_cache_memory_bytes
    else:
        requested = math.ceil(gpu.memory_bytes * utilisation)
        kv = requested - weights.total - buffer - allowance
    in_flight = max_concurrent_batches(spec) * batched
    num_blocks = blocks_per_request = None
    if groups is not None:
        block_bytes, blocks_per_request, num_blocks = kv_blocks(
            groups,
            kv,
            max_model_len,
            in_flight,
            p.pipeline_parallel_size,
            p.decode_context_parallel_size,
        )
        request = block_bytes * blocks_per_request
    else:
        request = per_request_bytes(
            records,
            max_model_len,
            in_flight,
            p.pipeline_parallel_size,
            p.decode_context_parallel_size,
        )
    return Capacity(
        gpu=gpu,
        mega_moe=mega_moe,
        weights=weights,
        symmetric_buffer=buffer,
        allowance=allowance,
        requested=requested,
        kv_bytes=kv,
        fixed_kv_budget=engine.kv_cache_memory_bytes is not None,
        per_request_bytes=request,
        dp_ranks=p.data_parallel_size,
        max_model_len=max_model_len,
        num_blocks=num_blocks,
        blocks_per_request=blocks_per_request,
    )


def gpu_types(nodes: Sequence[NodeFacts]) -> tuple[GpuType, ...]:
    """The distinct GPU types among ``nodes``: memory from the node's labels, else the catalog's
    product memory; nodes whose memory is known neither way are left out."""
    seen: dict[tuple[str, int], GpuType] = {}
    for node in nodes:
        product = node.product or "unknown product"
        if node.gpu_memory_mib:  # 0 is an unreadable label, never a size
            mib, source = node.gpu_memory_mib, node.memory_source or "label"
        elif (known := PRODUCT_MEMORY_MIB.get(product)) is not None:
            mib, source = known, "catalog product memory"
        else:
            continue
        seen.setdefault((product, mib), GpuType(product, mib * MIB, source))
    return tuple(seen[k] for k in sorted(seen))


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

    def rows(mega: bool) -> tuple[tuple[Capacity, ...], str]:
        out: list[Capacity] = []
        for gpu in gpus:
            cap = capacity(spec, facts, release, mega, gpu)
            if isinstance(cap, Unknown):
                return (), cap.reason
            out.append(cap)
        return tuple(out), ""

    mine, unknown = rows(mega_moe)
    other = rows(not mega_moe)[0] if with_other and not unknown else ()
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
