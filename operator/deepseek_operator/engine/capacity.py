"""The capacity model: per GPU type, what one replica's weights, MegaMoE buffer and allowances
leave for the KV cache at ``gpuMemoryUtilization``, and how many requests at ``maxModelLen`` fit.

It follows how vLLM sizes the KV cache (vLLM 0.33.0's own code): requested memory is
``ceil(total x gpu_memory_utilization)``; the KV room is what the weights, the symmetric buffer
and the profiled activations / CUDA graphs leave of it (``--kv-cache-memory-bytes`` replaces it
with a fixed figure); a request at ``maxModelLen`` needs every full-attention record for all its
tokens and, per sliding-window record, ``min(W - 1 + in-flight tokens, maxModelLen)`` tokens,
where in-flight tokens are ``max_concurrent_batches x maxNumBatchedTokens``. Where the release's
own KV cache groups are known (V4-Flash, and V4.1-Flash by the attention class the release picks
on the GPU; proven by conformance/capacity_check.py) this is vLLM's block arithmetic on them
(``kv_blocks``); elsewhere a per-token estimate. KV is not sharded
over TP (``max_tp_shards=1``): every TP rank holds the whole request, pipeline stages split the
layers, and each DP rank has its own pool, so DP layouts hold more requests than TP layouts of
the same GPU count. Pure: no clock, no environment, no Kubernetes.

The KV arithmetic itself is :mod:`.kv_cache`; the report and its messages are
:mod:`.capacity_report`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.catalog.geometry import CapacityGeometry, find_geometry
from deepseek_operator.catalog.gpu_memory import (
    ACTIVATION_BYTES_PER_TOKEN_HIDDEN,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    FIXED_OVERHEAD_BYTES,
    MIB,
    PRODUCT_MEMORY_MIB,
    RELEASE_MEMORY,
    SYMMETRIC_BUFFER_BYTES_PER_ELEMENT,
    default_max_num_batched_tokens,
)
from deepseek_operator.catalog.gpus import find_product
from deepseek_operator.engine.kv_cache import (
    kv_blocks,
    kv_layout,
    kv_records,
    max_concurrent_batches,
    per_request_bytes,
    pool_concurrency,
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
    # Compute capability (the node's, else the product's); V4.1's KV layout depends on it.
    cc: tuple[int, int] | None = None

    @property
    def cc_major(self) -> int | None:
        """The compute capability's major: the node's, else the catalog's for the product."""
        if self.cc is not None:
            return self.cc[0]
        product = find_product(self.product)
        return product.cc[0] if product is not None else None


@dataclass(frozen=True)
class Weights:
    """Weight bytes per GPU, by component (the MegaMoE extras are zero on the FusedMoE path)."""

    routed: int  # routed experts and their block scales, as the checkpoint stores them
    shared: int  # shared experts as the FusedMoE path shards them over TP
    dense: int  # attention, norms, routers, embedding, LM head (sharded over TP)
    draft: int  # the speculative draft's layers
    replicated: int = 0  # the dense layers vLLM builds whole on every TP rank
    rope_cache: int = 0  # fp32 rotary cos/sin caches (buffers, not in the checkpoint)
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
            + self.replicated
            + self.rope_cache
            + self.padding
            + self.retained_shared
            + self.replicated_shared
        )

    @property
    def mega_moe_extra(self) -> int:
        """What MegaMoE's layout adds over the FusedMoE path."""
        return self.padding + self.retained_shared + self.replicated_shared


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
    # Whose groups the blocks are (V4.1: the attention class and record), or why an estimate.
    kv_layout: str = ""

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
    # Whole on every TP rank (ReplicatedLinear / disable_tp layers); stages split the layers.
    replicated = int(geometry.replicated_bytes / pp)
    draft = 0
    if spec.engine.speculative_config is not None:
        draft_experts = facts.num_draft_routed_experts or facts.num_routed_experts
        draft = int(
            draft_experts * 3 * hidden * inter * geometry.draft_layers * routed_share * per_elem
        )
    common = {
        "routed": routed,
        "shared": shared_full // tp,
        "dense": dense,
        "draft": draft,
        "replicated": replicated,
        "rope_cache": geometry.rope_cache_bytes,
    }
    if not mega_moe:
        return Weights(**common)
    multiple = behaviour.mega_moe_intermediate_multiple
    padded = -(-inter // multiple) * multiple if multiple else inter
    return Weights(
        **common,
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
    layout = kv_layout(geometry, spec, release, gpu.cc_major)
    if isinstance(layout, str):
        groups, layout_note = None, f"per-token estimate ({layout})"
    else:
        layout_note, groups = layout
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
        kv_layout=layout_note,
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
        seen.setdefault((product, mib), GpuType(product, mib * MIB, source, node.cc))
    return tuple(seen[k] for k in sorted(seen))
