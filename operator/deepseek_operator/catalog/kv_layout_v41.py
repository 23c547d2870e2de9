"""DeepSeek V4.1-Flash's KV cache as vLLM lays it out: the attention class a release picks on a
GPU, the records and pages of its cache layers, and the KV cache groups its planner forms.

Sources, each release's own code (vLLM 0.30.0-0.33.0): ``models/deepseek_v41/attention.py``
(``DeepseekV4Attention.__init__`` / ``get_kv_cache_spec``, ``DeepseekV4IndexerCache``),
``models/deepseek_v41/compressor.py`` (``CompressorStateCache``), ``models/deepseek_v41/
nvidia/model.py`` (``_select_dsv4_attn_cls``), ``nvidia/flash_mla_mega_attn.py``
(``is_available_for``), ``models/deepseek_v41/sparse_mla.py`` and ``nvidia/flashinfer_sparse.py``
(kernel block sizes), ``v1/attention/backends/mla/sparse_swa.py`` (``DeepseekV4SWACache``),
``v1/kv_cache_interface.py`` (page padding) and the planner (0.33.0 ``v1/core/
kv_cache_planning.py``, 0.30.0-0.32.0 ``v1/core/kv_cache_utils.py``). conformance/
capacity_oracle.py builds the same specs with the release's own classes and checks the groups and
blocks equal. Pure data and arithmetic: no I/O.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from deepseek_operator.catalog.kv_layout import KvGroup, KvLayerSpec

# The checkpoint (config.json text_config): 40 backbone layers; compress ratio 0 (sliding window
# only) for layers 0-1, 2 for 2-19, 1 for 20-39. Only kv-source layers own a compressed-KV cache
# and its indexer K cache; ratio-2 sources also a compressor state ring. 64 heads, 8 o_groups.
LAYERS = 40
RATIOS = (0, 0, *([2] * 18), *([1] * 20))
KV_SOURCES = (2, 8, 14, 20)
HEADS, O_GROUPS = 64, 8
HEAD_DIM = 512
WINDOW = 128  # sliding_window
INDEX_HEAD_DIM = 128
SWA_BLOCK = 32  # DeepseekV4Attention.__init__ passes block_size=32 to its SWA cache
WV_GROUP_SIZE = 8  # mega attention wants 8 heads per wo_a group (common/ops/fused_layout.py)

# Releases whose V4.1 has mega attention (nvidia/flash_mla_mega_attn.py, 0.31.0 on) and whose SWA
# cache takes packed_block_stride_alignment (0.33.0 on: the block stride holds whole rows of both
# packed records, lcm(SWA record, compressed record)).
MEGA_ATTENTION_RELEASES = frozenset({"0.31.0", "0.32.0", "0.33.0"})
STRIDE_ALIGNED_RELEASES = frozenset({"0.33.0"})
KNOWN_RELEASES = frozenset({"0.30.0"}) | MEGA_ATTENTION_RELEASES


@dataclass(frozen=True)
class V41Attention:
    """What the attention class a release picks stores per token, and in which pages."""

    name: str  # vLLM's attention class
    kv_dtype: str  # the resolved --kv-cache-dtype: fp8_ds_mla, nvfp4_ds_mla or bfloat16
    swa_bytes: int  # sliding-window record per token
    compressed_bytes: int  # compressed-KV record per stored state
    page_alignment: int  # pages round up to a multiple of this
    block_size: int  # the attention backend's kernel block size: compressed KV and indexer
    stride_alignment: int  # the SWA spec's block stride alignment (1: none)
    indexer_alignment: int


_FLASHINFER = ("FLASHINFER_MLA_SPARSE_DSV4", "FLASHINFER_MLA_SPARSE_DSV41")
_FLASHMLA = ("FLASHMLA_SPARSE", "FLASHMLA_SPARSE_DSV4", "FLASHMLA_SPARSE_DSV41")
_MEGA = "FLASHMLA_MEGA_ATTN_DSV41"
_NOT_V41 = ("FLASHINFER_MLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM120")


def _mega_serves(tensor_parallel: int) -> bool:
    """``is_available_for``'s topology test: heads and o_groups divide by TP and leave 8 heads
    per ``wo_a`` group."""
    local_heads, local_groups = HEADS // tensor_parallel, O_GROUPS // tensor_parallel
    return (
        HEADS % tensor_parallel == 0
        and O_GROUPS % tensor_parallel == 0
        and local_groups > 0
        and local_heads == local_groups * WV_GROUP_SIZE
    )


def _class(
    release: str, sm100: bool, tensor_parallel: int, packed: bool, backend: str | None
) -> str:
    """``mega``, ``flashmla`` or ``flashinfer`` as ``_select_dsv4_attn_cls`` picks (SM90 / SM100),
    or why none. Without a backend a bf16 cache is taken as FlashInfer's (the packed classes
    refuse bf16, so such a spec needs ``--attention-backend FLASHINFER_MLA_SPARSE_DSV41``)."""
    mega_release = release in MEGA_ATTENTION_RELEASES
    if backend in _NOT_V41:
        return f"--attention-backend {backend} is not a V4.1 attention backend (vLLM refuses it)"
    if backend in _FLASHINFER or (backend is None and not packed):
        return "flashinfer"
    if backend == _MEGA:
        if not mega_release or not sm100 or not _mega_serves(tensor_parallel):
            return f"mega attention cannot serve vLLM {release} at TP {tensor_parallel} here"
        return "mega"
    if backend in _FLASHMLA:
        return "flashmla"
    # Any other backend falls through to the default: mega attention on SM100 where its kernel
    # serves the topology, else FlashMLA.
    return "mega" if mega_release and sm100 and _mega_serves(tensor_parallel) else "flashmla"


# Pure functions of a few small values that every capacity figure (and each layout the advice
# weighs) asks again; bounded, since a dtype and a backend name come from the user's spec.
@functools.lru_cache(maxsize=64)
def attention(
    release: str,
    cc_major: int,
    tensor_parallel: int,
    packed: bool,
    kv_cache_dtype: str,
    backend: str | None = None,
) -> V41Attention | str:
    """The V4.1 attention a release runs for ``--attention-backend`` ``backend`` (None: its
    default choice), with the records it stores; a string says why it is not known."""
    if release not in KNOWN_RELEASES:
        return f"vLLM {release} has no known V4.1 KV layout"
    if cc_major not in (9, 10):
        return f"no V4.1 KV layout known for compute capability {cc_major}.x"
    mxfp8 = cc_major == 10  # _use_v41_mxfp8_kv_record: the V4.1 records only on SM100
    kind = _class(release, mxfp8, tensor_parallel, packed, backend)
    dtype = kv_cache_dtype.lower()
    if kind == "flashinfer":
        if dtype not in ("auto", "bfloat16", "bf16"):
            return f"FlashInfer's {kv_cache_dtype!r} rows are not modelled (bf16 rows are)"
        # FlashInfer's plain rows: 512 bf16 values per token, natural pages, 128-token blocks.
        return V41Attention(
            "DeepseekV4FlashInferMLAAttention", "bfloat16", 1024, 1024, 512, 128, 1, 512
        )
    if kind not in ("mega", "flashmla"):
        return kind
    mega = kind == "mega"
    if dtype in ("auto", "fp8"):
        # An unspecific dtype resolves to the record the class prefers (packed_kv_cache_dtype).
        dtype = "nvfp4_ds_mla" if mega else "fp8_ds_mla"
    if dtype == "nvfp4_ds_mla" and not mega:
        return "nvfp4_ds_mla needs mega attention (SM100, vLLM 0.31.0 on, TP up to 8)"
    if dtype not in ("fp8_ds_mla", "nvfp4_ds_mla"):
        return f"kvCacheDtype {kv_cache_dtype!r} is no packed V4.1 record"
    swa = 528 if mxfp8 else 584  # MXFP8 512 + 16 scale bytes, else V4's 584 B record
    compressed = 288 if dtype == "nvfp4_ds_mla" else swa  # NVFP4: 256 B e2m1 + 32 scales
    alignment = 512 if mxfp8 else 576
    stride = math.lcm(swa, compressed) if mxfp8 and release in STRIDE_ALIGNED_RELEASES else 1
    # The sparse-MLA backend's kernel block: 64 tokens on SM90, 128 on SM100.
    name = "DeepseekV4MegaAttnAttention" if mega else "DeepseekV4FlashMLAAttention"
    return V41Attention(
        name, dtype, swa, compressed, alignment, 64 if cc_major == 9 else 128, stride, alignment
    )


def _page(states: int, record: int, alignment: int) -> int:
    """``page_size_bytes`` of a spec: states x record, padded up to the alignment."""
    return -(-states * record // alignment) * alignment


def _split(spec: KvLayerSpec, layers: int, anchor: int) -> tuple[KvGroup, ...]:
    """The planner's split of a state bucket (sliding window, circular buffer): as many layers
    per group as one block of the widest group holds, layers dealt out round-robin."""
    groups = -(-layers // max(anchor // spec.page_bytes, 1))
    return tuple(KvGroup(((spec, len(range(i, layers, groups))),)) for i in range(groups))


@functools.lru_cache(maxsize=64)
def groups(att: V41Attention) -> tuple[KvGroup, ...]:
    """V4.1-Flash's KV cache groups under ``att`` (no speculative decoding).

    Every layer's SWA cache (32-token blocks, window 128); one full-attention group holding the
    kv sources' compressed KV (``block_size / ratio`` states per block) and their indexer K caches
    (132 B per state: 128 fp8 + 4 B scale); the ratio-2 sources' compressor rings (one block of 8
    rows of fp32 [kv, score] x 512 per request). The planner packs block-outermost: the full
    group sets the block (no repeating pattern), the SWA and ring buckets split to fit it.
    """
    full: dict[KvLayerSpec, int] = {}
    for layer in KV_SOURCES:
        ratio = RATIOS[layer]
        states = att.block_size // ratio
        for record, alignment in (
            (att.compressed_bytes, att.page_alignment),
            (INDEX_HEAD_DIM + INDEX_HEAD_DIM // 128 * 4, att.indexer_alignment),
        ):
            spec = KvLayerSpec("full", att.block_size, _page(states, record, alignment))
            full[spec] = full.get(spec, 0) + 1
    full_group = KvGroup(tuple(full.items()))
    swa = KvLayerSpec(
        "sliding",
        SWA_BLOCK,
        _page(SWA_BLOCK, att.swa_bytes, att.page_alignment),
        WINDOW,
        att.stride_alignment,
    )
    ring = KvLayerSpec("circular", 8, 8 * 2 * HEAD_DIM * 4)
    rings = sum(1 for layer in KV_SOURCES if RATIOS[layer] > 1)
    anchor = max(full_group.page_bytes, swa.page_bytes, ring.page_bytes)
    return (*_split(swa, LAYERS, anchor), full_group, *_split(ring, rings, anchor))
