"""What one DeepSeek V4 / V4.1 checkpoint puts on the GPUs: its capacity geometry (layers,
experts, dense and replicated bytes, rotary caches, KV records and groups), the data the capacity
model (engine/capacity.py) reads.

Sources: the checkpoints' HF configs and stored sizes on the Hugging Face Hub and vLLM's own
constructors (0.30.0-0.33.0). Each figure says where it came from; INFERRED marks arithmetic on
those sources rather than a figure read from them.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepseek_operator.catalog.gpu_memory import GIB
from deepseek_operator.catalog.kv_layout import (
    V4_FLASH_RATIOS,
    V4_PRO_RATIOS,
    V41_FLASH_BF16,
    V41_FLASH_PACKED,
    KvGroup,
    KvRecord,
    v4_all_groups,
    v4_records,
)


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
    # vLLM picks (catalog/kv_layout_v41.py, proven the same way), not on kv_groups.
    kv_layout: str | None = None
    # Bytes of the dense part vLLM builds whole on every TP rank (``ReplicatedLinear`` and
    # ``disable_tp`` layers, fp32 hyper-connection mixers, routers), split over pipeline stages
    # only; ``dense_bytes`` is then the TP-sharded rest. 0 where the split is not counted.
    replicated_bytes: int = 0
    # The fp32 rotary cos/sin caches every rank holds as buffers (``rope_cache_bytes``).
    rope_cache_bytes: int = 0


_V4_FLASH_GROUPS = v4_all_groups(V4_FLASH_RATIOS)
_V4_PRO_GROUPS = v4_all_groups(V4_PRO_RATIOS)


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
            "packed": v4_records(V4_FLASH_RATIOS, 584),
            "bf16": v4_records(V4_FLASH_RATIOS, 1024),
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
        kv_records={"packed": V41_FLASH_PACKED, "bf16": V41_FLASH_BF16},
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
        "packed": v4_records(V4_PRO_RATIOS, 584),
        "bf16": v4_records(V4_PRO_RATIOS, 1024),
    },
    source=(
        "HF config (61 layers, compress ratios [128, 128, 4] + [128, 4] x 29, top-6, 1 shared "
        "expert, 1M positions); 865 GB stored"
    ),
    kv_groups=_V4_PRO_GROUPS,
)
GEOMETRY["deepseek-ai/DeepSeek-V4-Pro-Base"] = GEOMETRY["deepseek-ai/DeepSeek-V4-Pro"]


def find_geometry(name: str) -> CapacityGeometry | None:
    """The capacity geometry of a HF id or its basename (case-insensitive), or None."""
    key = name.strip().rstrip("/").lower().split("/")[-1]
    for full, geometry in GEOMETRY.items():
        if full.lower().split("/")[-1] == key:
            return geometry
    return None
