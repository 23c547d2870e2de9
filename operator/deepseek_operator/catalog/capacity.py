"""What GPU memory a DeepSeek V4 / V4.1 replica needs: checkpoint geometry, KV records, release
behaviour and per-product GPU memory, the data the capacity model (engine/capacity.py) reads.

Sources: the checkpoints' HF configs and stored sizes on the Hugging Face Hub, vLLM 0.33.0's own code
(``models/deepseek_v4/attention.py`` and ``compressor.py``, ``models/deepseek_v41/``,
``v1/kv_cache_interface.py``, ``engine/arg_utils.py``, ``model_executor/layers/fused_moe/
deep_gemm_mega_moe.py``) and the MegaMoE PR's measurement (vllm#57220). Each figure says where it
came from; INFERRED marks arithmetic on those sources rather than a figure read from them.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30
MIB = 2**20


@dataclass(frozen=True)
class KvRecord:
    """One per-layer KV cache of a DeepSeek V4 / V4.1 attention layer (one ``get_kv_cache_spec``).

    ``tokens_per_state`` tokens share one ``bytes_per_state`` record; a ``window`` makes it a
    sliding-window spec that reserves ``min(window - 1 + in-flight tokens, maxModelLen)`` tokens
    per request; ``circular_rows`` makes it a circular buffer of that many rows per request.
    """

    name: str
    layers: int
    bytes_per_state: int
    tokens_per_state: int = 1
    window: int | None = None
    circular_rows: int | None = None


# kv_groups keys: the kvCacheDtype family, plus this suffix with MTP speculative decoding.
MTP_SUFFIX = "+mtp"


@dataclass(frozen=True)
class KvLayerSpec:
    """One layer's KV cache spec as the release's ``get_kv_cache_spec()`` returns it.

    ``kind`` is vLLM's spec family: ``full`` (a block per ``block_size`` tokens of the whole
    context), ``sliding`` (``cdiv(min(window - 1 + in-flight tokens, maxModelLen), block_size)
    + 1`` blocks per request) or ``circular`` (one block per request). ``page_bytes`` is the
    spec's ``page_size_bytes``, alignment padding included; ``stride_alignment`` its
    ``get_block_stride_alignment()`` (vLLM 0.33.0: the block stride is rounded up to the lcm of
    every layer's).
    """

    kind: str
    block_size: int
    page_bytes: int
    window: int | None = None
    stride_alignment: int = 1


@dataclass(frozen=True)
class KvGroup:
    """One KV cache group as the release's planner forms it: (layer spec, layer count) pairs.

    Every group draws blocks from one shared pool; a block costs the largest group's bytes.
    """

    layers: tuple[tuple[KvLayerSpec, int], ...]

    @property
    def page_bytes(self) -> int:
        """Bytes one block of this group spans over all its layers."""
        return sum(spec.page_bytes * count for spec, count in self.layers)


@dataclass(frozen=True)
class CapacityGeometry:
    """What the weights and KV records of one checkpoint take, from its configs and stored sizes."""

    num_layers: int
    top_k: int
    n_shared_experts: int
    max_model_len: int  # max_position_embeddings
    # Bytes the checkpoint stores outside the routed and shared experts that the GPUs hold
    # (attention, norms, routers, embedding and LM head; engram tables stay in host memory with
    # the recipe's cpu_offload), sharded over TP.
    dense_bytes: int
    draft_layers: int  # MTP / DSpark layers loaded with speculative decoding
    # KV records per kvCacheDtype family: "packed" (vLLM's default fp8_ds_mla-style records) and
    # "bf16" (unquantised 512-wide latents): a per-token estimate, used where ``kv_groups`` is
    # unknown.
    kv_records: dict[str, tuple[KvRecord, ...]]
    source: str
    # The release's own KV cache groups per kvCacheDtype family, and per family + MTP_SUFFIX with
    # MTP speculative decoding (conformance/capacity_oracle.py
    # builds them with vLLM's cache layers and planner and checks them equal): when known, the
    # capacity is vLLM's block arithmetic on them instead of the per-token estimate.
    kv_groups: dict[str, tuple[KvGroup, ...]] | None = None
    # "v41-flash": the groups depend on the release, the GPU and TP through the attention class
    # vLLM picks (catalog/capacity_v41.py, proven the same way), not on kv_groups.
    kv_layout: str | None = None
    # Bytes of the dense part vLLM builds whole on every TP rank (``ReplicatedLinear`` and
    # ``disable_tp`` layers, fp32 hyper-connection mixers, routers), split over pipeline stages
    # only; ``dense_bytes`` is then the TP-sharded rest. 0 where the split is not counted.
    replicated_bytes: int = 0
    # The fp32 rotary cos/sin caches every rank holds as buffers (``rope_cache_bytes``).
    rope_cache_bytes: int = 0


# V4 (models/deepseek_v4/attention.py + compressor.py, 0.33.0): every layer keeps a 128-token
# sliding window of 584 B fp8_ds_mla records (448 fp8 NoPE + 128 B RoPE + 8 B scale); ratio-4
# layers store a compressed record per 4 tokens and a 132 B fp8 indexer record per compressed
# token; ratio-128 layers one record per 128 tokens. The fp32 compressor state is 2 * coff * 512
# wide (coff 2 for ratio 4, 1 for ratio 128) with a sliding window of coff * ratio tokens.


def _v4_groups(
    ratios: tuple[int, ...],
    pages: tuple[int, int, int, int, int, int, int],
    mtp: bool,
) -> tuple[KvGroup, ...]:
    """A V4 checkpoint's KV cache groups in vLLM 0.33.0, from its compress ratios and each spec's
    page bytes (SWA, ratio-4 KV, indexer, ratio-128 KV, ratio-4 state, indexer state, ratio-128
    state).

    Every layer keeps a sliding-window (SWA) cache (with MTP speculative decoding the draft
    layer, compress ratio 1, adds one more); one full-attention group holds the compressed KV of
    the ratio-4 and ratio-128 layers with the ratio-4 layers' indexer caches (256-token blocks:
    64 ratio-4 or 2 ratio-128 states); the ratio-4 compressor states (the KV's and the
    indexer's; window 8, 4-token blocks) form one group and the ratio-128 states (window 128,
    8-token blocks) another. The planner packs block-outermost: the widest group sets the block
    and the SWA caches split into as many groups as that block holds, dealt out round-robin
    (V4-Flash: 22 + 21; V4-Pro: 31 + 30).
    """
    swa, c4, indexer, c128, c4_state, indexer_state, c128_state = pages
    n4 = sum(1 for r in ratios if r == 4)
    n128 = sum(1 for r in ratios if r == 128)
    window = KvLayerSpec("sliding", 64, swa, 128)
    full = KvGroup(
        (
            (KvLayerSpec("full", 256, c4), n4),
            (KvLayerSpec("full", 256, indexer), n4),
            (KvLayerSpec("full", 256, c128), n128),
        )
    )
    states4 = KvGroup(
        (
            (KvLayerSpec("sliding", 4, c4_state, 8), n4),
            (KvLayerSpec("sliding", 4, indexer_state, 8), n4),
        )
    )
    states128 = KvGroup(((KvLayerSpec("sliding", 8, c128_state, 128), n128),))
    layers = len(ratios) + (1 if mtp else 0)
    anchor = max(full.page_bytes, states4.page_bytes, states128.page_bytes)
    split = -(-layers // max(anchor // swa, 1))
    swa_groups = tuple(KvGroup(((window, len(range(i, layers, split))),)) for i in range(split))
    # The state groups come in the order their ratio first appears (V4-Pro starts at 128).
    states = (states4, states128) if ratios.index(4) < ratios.index(128) else (states128, states4)
    return (*swa_groups, full, *states)


# Page bytes (vLLM 0.33.0 page_size_bytes): fp8_ds_mla pads 584 B records to a 576 B multiple
# (64 x 584 -> 37440; 2 x 584 -> 1728; 64 x 132 indexer -> 8640), fp32 compressor states are
# 4 x 2 x 2 x 512 x 4 B (ratio 4) and 8 x 2 x 512 x 4 B (ratio 128) padded the same way; bf16 rows
# are 1024 B per state with 512 B alignment. V4-Pro has the same head and indexer dimensions.
_V4_PAGES = {
    "packed": (37440, 37440, 8640, 1728, 32832, 8640, 32832),
    "bf16": (65536, 65536, 8704, 2048, 32768, 8192, 32768),
}


def _v4_all_groups(ratios: tuple[int, ...]) -> dict[str, tuple[KvGroup, ...]]:
    """``kv_groups`` of a V4 checkpoint: per kvCacheDtype family, with and without MTP."""
    return {
        family + suffix: _v4_groups(ratios, pages, mtp=bool(suffix))
        for family, pages in _V4_PAGES.items()
        for suffix in ("", MTP_SUFFIX)
    }


# V4-Flash's config.json: compress_ratios [0, 0, 4] + [128, 4] * 20 over its 43 layers.
V4_FLASH_RATIOS = (0, 0, 4, *([128, 4] * 20))
# V4-Pro's config.json: 61 layers, compress_ratios [128, 128, 4] + [128, 4] * 29: no
# sliding-window-only layer, 30 ratio-4 (with the indexer) and 31 ratio-128 layers.
V4_PRO_RATIOS = (128, 128, 4, *([128, 4] * 29))
_V4_FLASH_GROUPS = _v4_all_groups(V4_FLASH_RATIOS)
_V4_PRO_GROUPS = _v4_all_groups(V4_PRO_RATIOS)


def _v4_records(ratios: tuple[int, ...], bytes_per_state: int) -> tuple[KvRecord, ...]:
    """The per-token estimate's records of a V4 checkpoint (only where no groups are known)."""
    n4 = sum(1 for r in ratios if r == 4)
    n128 = sum(1 for r in ratios if r == 128)
    return (
        KvRecord("swa", len(ratios), bytes_per_state, window=128),
        KvRecord("c4", n4, bytes_per_state, tokens_per_state=4),
        KvRecord("c4-indexer", n4, 132, tokens_per_state=4),
        KvRecord("c128", n128, bytes_per_state, tokens_per_state=128),
        KvRecord("c4-state", n4, 2 * 2 * 512 * 4, window=8),
        KvRecord("c128-state", n128, 2 * 1 * 512 * 4, window=128),
    )


# V4.1-Flash's per-token estimate, kept only where catalog/capacity_v41.py has no layout (V4.1
# speculative decoding, PP / PCP / DCP, GPUs other than SM90 / SM100); it holds more requests than
# vLLM's own groups. From models/deepseek_v41/attention.py + compressor.py (0.33.0): 40
# layers, a 528 B MXFP8 sliding-window record per layer; the compressed KV is shared across layers (only kv-source
# layers own a cache) in 288 B nvfp4_ds_mla records: DeepSeek's own figure is 890 B of global KV
# per token over all kv sources and their indexers, taken here as one record of 890 B per token.
# The compressor keeps a CircularBufferSpec of max(8, next power of two of drafts + 2) rows of
# fp32 2 * 2 * 512 per request and layer. INFERRED: window 128 like V4; the global figure's
# split into sources is not needed for the per-request sum.
_V41_FLASH_PACKED = (
    KvRecord("swa", 40, 528, window=128),
    KvRecord("global", 1, 890),
    KvRecord("compressor-ring", 40, 2 * 2 * 512 * 4, circular_rows=8),
)
_V41_FLASH_BF16 = (
    KvRecord("swa", 40, 1024, window=128),
    KvRecord("global", 1, 890 * 1024 // 288),
    KvRecord("compressor-ring", 40, 2 * 2 * 512 * 4, circular_rows=8),
)


def rope_cache_bytes(max_positions: int, rope_dim: int) -> int:
    """The fp32 rotary caches one rank of a DeepSeek V4 / V4.1 model holds.

    vLLM (models/deepseek_v4/common/rope.py ``build_deepseek_v4_rope``, the same in
    models/deepseek_v41/, 0.30.0-0.33.0) builds every layer's rotary embedding with
    ``max_position=config.max_position_embeddings`` (not ``--max-model-len``) and
    ``is_deepseek_v4``, so ``get_rope`` returns a ``DeepseekV4ScalingRotaryEmbedding``
    (model_executor/layers/rotary_embedding/deepseek_scaling_rope.py), whose ``__init__``
    registers an fp32 ``cos_sin_cache`` of ``original_max_position x factor`` rows by
    ``rope_dim`` (cos and sin halves) on the GPU. ``get_rope`` shares one instance per
    parameter set: the sliding-window layers' (theta 10000, factor 1 over all positions) and
    the compressed layers' (theta 160000, YaRN factor 16 over 65,536 positions), both
    ``max_positions`` rows: two caches, whatever TP, 256 MiB each at 1M positions and 64
    rotary dimensions. They are not in the checkpoint, so not in its stored size.
    """
    return 2 * max_positions * rope_dim * 4


def v4_flash_dense() -> tuple[int, int]:
    """V4-Flash's dense part as vLLM 0.30.0-0.33.0 builds it: (TP-sharded, replicated) bytes.

    Counted from its constructors (models/deepseek_v4/attention.py ``DeepseekV4Attention`` and
    ``DeepseekV4Indexer``, compressor.py ``DeepseekCompressor``, nvidia/model.py
    ``DeepseekV4DecoderLayer`` and ``DeepseekV4MoE``) on V4-Flash's config.json (transformers'
    ``DeepseekV4Config`` defaults): hidden 4096, 64 heads of 512, q_lora_rank 1024, 8 o_groups
    of o_lora_rank 1024, indexer 64 heads of 128, vocab 129280, hc_mult 4, 256 routed experts.
    Linear layers with the checkpoint's quant config are FP8 (1 B; the e8m0 block scales,
    1 B per 128 x 128, are left out), those built with ``quant_config=None`` BF16.

    - Sharded over TP: ``wq_b`` and ``wo_a`` (``ColumnParallelLinear``) and ``wo_b``
      (``RowParallelLinear``), 3 x 1024 x 32768 FP8 per layer; the BF16 embedding
      (``VocabParallelEmbedding``) and LM head (``ParallelLMHead``).
    - Whole on every TP rank: ``fused_wqa_wkv`` (``MergedColumnParallelLinear`` with
      ``disable_tp``, 4096 x (1024 + 512) FP8); the compressor's ``fused_wkv_wgate``
      (``disable_tp``, ``quant_config=None``: 4096 x 2 x coff x 512 BF16, coff 2 at ratio 4,
      1 at ratio 128); the ratio-4 indexer's ``wq_b`` (``ReplicatedLinear``, 1024 x 8192 FP8),
      ``weights_proj`` (4096 x 64 BF16) and its compressor (4096 x 2 x 2 x 128 BF16); the router
      (``GateLinear``, a ``ReplicatedLinear``, 4096 x 256 BF16); the hyper-connection mixers
      ``hc_attn_fn`` / ``hc_ffn_fn`` (2 x 24 x 16384 fp32). Norms, sinks, ``ape``, biases and
      the three hash layers' token tables (together < 0.05 GiB) are left out.

    1.20 GiB replicated, 6.00 GiB sharded; the former estimate (284B parameters less the
    experts, all sharded) had 7.49 GiB, all sharded.
    """
    hidden, q_lora, head, heads = 4096, 1024, 512, 64
    index_heads, index_head = 64, 128
    n4 = sum(1 for r in V4_FLASH_RATIOS if r == 4)
    n128 = sum(1 for r in V4_FLASH_RATIOS if r == 128)
    layers = len(V4_FLASH_RATIOS)
    sharded = layers * 3 * q_lora * heads * head + 2 * 129280 * hidden * 2
    per_layer = (
        hidden * (q_lora + head)  # fused_wqa_wkv, FP8
        + hidden * 256 * 2  # router gate, BF16
        + 2 * (2 + 4) * 4 * 4 * hidden * 4  # hc_attn_fn + hc_ffn_fn, fp32
    )
    compressors = n4 * hidden * 2 * 2 * head * 2 + n128 * hidden * 2 * 1 * head * 2
    indexers = n4 * (
        q_lora * index_heads * index_head  # wq_b, FP8
        + hidden * index_heads * 2  # weights_proj, BF16
        + hidden * 2 * 2 * index_head * 2  # the indexer's compressor, BF16
    )
    return sharded, layers * per_layer + compressors + indexers


_V4_FLASH_SHARDED, _V4_FLASH_REPLICATED = v4_flash_dense()
# Every V4 / V4.1 checkpoint: 1,048,576 positions, qk_rope_head_dim 64 (V4.1: INFERRED, the same
# rotary layout; its models/deepseek_v41/common/rope.py builds the two caches the same way).
_V4_ROPE_CACHE = rope_cache_bytes(1_048_576, 64)

GEOMETRY: dict[str, CapacityGeometry] = {
    "deepseek-ai/DeepSeek-V4-Flash": CapacityGeometry(
        num_layers=43,
        top_k=6,
        n_shared_experts=1,
        max_model_len=1_048_576,
        dense_bytes=_V4_FLASH_SHARDED,
        replicated_bytes=_V4_FLASH_REPLICATED,
        rope_cache_bytes=_V4_ROPE_CACHE,
        draft_layers=1,
        kv_records={
            "packed": _v4_records(V4_FLASH_RATIOS, 584),
            "bf16": _v4_records(V4_FLASH_RATIOS, 1024),
        },
        source="HF config (43 layers, top-6, 1 shared expert, 1M positions); vLLM's constructors",
        kv_groups=_V4_FLASH_GROUPS,
    ),
    # The checkpoint's stored sizes: attention / norms / routers 5.6 GiB (of which the FP8 shared
    # experts, 40 x 3 x 5120 x 2304 B = 1.32 GiB, are counted apart) and embedding + LM head
    # 5.8 GiB; the 188.8 GiB engram tables stay in host memory (cpu_offload).
    "deepseek-ai/DeepSeek-V4.1-Flash": CapacityGeometry(
        num_layers=40,
        top_k=6,
        n_shared_experts=1,
        max_model_len=1_048_576,
        dense_bytes=int((5.6 + 5.8) * GIB) - 40 * 3 * 5120 * 2304,
        rope_cache_bytes=_V4_ROPE_CACHE,
        draft_layers=1,
        kv_records={"packed": _V41_FLASH_PACKED, "bf16": _V41_FLASH_BF16},
        source="HF config (40 layers, top-6, 1 shared expert); stored sizes of the checkpoint",
        kv_layout="v41-flash",
    ),
}
GEOMETRY["deepseek-ai/DeepSeek-V4-Flash-Base"] = GEOMETRY["deepseek-ai/DeepSeek-V4-Flash"]

# V4-Pro's config.json (the same fields for V4-Pro-Base, whose experts are FP8 instead of FP4:
# the capacity model takes the expert dtype from the checkpoint facts): 61 layers, hidden 7168,
# 384 routed experts (moe_intermediate_size 3072) top-6 plus 1 shared expert, one MTP layer
# (num_nextn_predict_layers 1), head_dim 512, sliding_window 128, index_head_dim 128,
# max_position_embeddings 1048576, compress_ratios V4_PRO_RATIOS.
# INFERRED dense part: the checkpoint's stored 865 GB (vllm-project/recipes#779) minus the FP4
# routed experts and FP8 shared experts of its 61 + 1 MTP layers; what is left (attention,
# compressors, indexers, norms, routers, the BF16 embedding and LM head) is ~25 GB.
_PRO_EXPERT_ELEMENTS = 3 * 7168 * 3072
GEOMETRY["deepseek-ai/DeepSeek-V4-Pro"] = CapacityGeometry(
    num_layers=61,
    top_k=6,
    n_shared_experts=1,
    max_model_len=1_048_576,
    dense_bytes=865 * 10**9 - 62 * (384 * _PRO_EXPERT_ELEMENTS * 17 // 32 + _PRO_EXPERT_ELEMENTS),
    rope_cache_bytes=_V4_ROPE_CACHE,
    draft_layers=1,
    kv_records={
        "packed": _v4_records(V4_PRO_RATIOS, 584),
        "bf16": _v4_records(V4_PRO_RATIOS, 1024),
    },
    source=(
        "HF config (61 layers, compress ratios [128, 128, 4] + [128, 4] x 29, top-6, 1 shared "
        "expert, 1M positions); 865 GB stored"
    ),
    kv_groups=_V4_PRO_GROUPS,
)
GEOMETRY["deepseek-ai/DeepSeek-V4-Pro-Base"] = GEOMETRY["deepseek-ai/DeepSeek-V4-Pro"]

# kvCacheDtype values that keep the packed records (vLLM maps auto / fp8 to fp8_ds_mla for these
# models) and those that store BF16 latents.
PACKED_KV_DTYPES = frozenset({"auto", "fp8", "fp8_e4m3", "fp8_ds_mla", "nvfp4_ds_mla"})
BF16_KV_DTYPES = frozenset({"bfloat16", "bf16"})


@dataclass(frozen=True, kw_only=True)
class ReleaseMemory:
    """How one vLLM release's MegaMoE path lays out the expert weights."""

    # MegaMoE pads the routed experts' intermediate size up to a multiple of this (None: no pad).
    mega_moe_intermediate_multiple: int | None
    # MegaMoE keeps the original shared-expert weights beside its fused copy.
    mega_moe_retains_shared: bool
    source: str


# 0.33.0 (models/deepseek_v4/nvidia/model.py): DeepGemmMegaMoEExperts gets the checkpoint's
# moe_intermediate_size unpadded and owns the fused shared expert (the caller drops its MLP),
# replicated over TP under sequence parallelism: the two fixes of vllm#57204. INFERRED for the
# older releases: they behave as the MegaMoE PR measured (2304 -> 2560, shared copy retained).
_PR_ERA = ReleaseMemory(
    mega_moe_intermediate_multiple=512,
    mega_moe_retains_shared=True,
    source="INFERRED: as measured by vllm#57220 (before vllm#57204)",
)
RELEASE_MEMORY: dict[str, ReleaseMemory] = {
    "0.30.0": _PR_ERA,
    "0.31.0": _PR_ERA,
    "0.32.0": _PR_ERA,
    "0.33.0": ReleaseMemory(
        mega_moe_intermediate_multiple=None,
        mega_moe_retains_shared=False,
        source="vLLM 0.33.0 models/deepseek_v4/nvidia/model.py",
    ),
}

# MegaMoE's symmetric buffer per rank: DeepGEMM sizes it by batched tokens x top-k x hidden.
# Calibrated (INFERRED) on DeepGEMM's ~3.0 GiB for V4-Flash at 8K batched tokens:
# 3 GiB / (8192 x 6 x 4096) = 16 B; V4-Pro's ~5.1 GiB comes out at 5.25 GiB (3 % over).
SYMMETRIC_BUFFER_BYTES_PER_ELEMENT = 16

# Allowances for what vLLM's profiling run measures besides weights and the symmetric buffer
# (INFERRED, not measured here): activations peak at about 32 B per batched token and hidden
# unit; CUDA graphs, NCCL buffers and the CUDA context take a fixed 2 GiB per GPU.
ACTIVATION_BYTES_PER_TOKEN_HIDDEN = 32
FIXED_OVERHEAD_BYTES = 2 * GIB

# vLLM 0.33.0 engine/arg_utils.py: the OpenAI server's default --max-num-batched-tokens is
# 16384 on GPUs of at least 160 GiB, 8192 on those of at least 70 GiB (not A100), else 2048.
# The default --gpu-memory-utilization is 0.9.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


def default_max_num_batched_tokens(gpu_memory_bytes: int, product: str) -> int:
    """vLLM's OpenAI-server default ``--max-num-batched-tokens`` on this GPU."""
    if gpu_memory_bytes >= 160 * GIB:
        return 16384
    if gpu_memory_bytes >= 70 * GIB and "a100" not in product.lower():
        return 8192
    return 2048


# Memory per GPU (MiB, what NVML and GFD's nvidia.com/gpu.memory report) by exact GFD product:
# for nodes without a memory label. INFERRED from the products' data sheets.
PRODUCT_MEMORY_MIB: dict[str, int] = {
    "NVIDIA-GB200": 189471,
    "NVIDIA-B200": 183359,
    "NVIDIA-GB300": 284208,
    "NVIDIA-B300-SXM6-AC": 275040,
    "NVIDIA-H200": 143771,
    "NVIDIA-H100-80GB-HBM3": 81559,
    "NVIDIA-H20": 97871,
    "NVIDIA-H800": 81559,
}


def find_geometry(name: str) -> CapacityGeometry | None:
    """The capacity geometry of a HF id or its basename (case-insensitive), or None."""
    key = name.strip().rstrip("/").lower().split("/")[-1]
    for full, geometry in GEOMETRY.items():
        if full.lower().split("/")[-1] == key:
            return geometry
    return None
