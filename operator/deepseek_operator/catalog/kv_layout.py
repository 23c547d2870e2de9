"""How a DeepSeek V4 / V4.1 replica's KV cache is laid out: the record, layer spec and group
shapes the capacity model (engine/kv_cache.py) reads, V4's groups and records in vLLM 0.33.0, and
V4.1-Flash's per-token estimate (its groups per release are in catalog/kv_layout_v41.py).

Sources: the checkpoints' HF configs and vLLM 0.33.0's own code (``models/deepseek_v4/
attention.py`` and ``compressor.py``, ``models/deepseek_v41/``, ``v1/kv_cache_interface.py``);
conformance/capacity_oracle.py builds the same groups with vLLM's cache layers and planner and
checks them equal. Each figure says where it came from; INFERRED marks arithmetic on those sources
rather than a figure read from them.
"""

from __future__ import annotations

from dataclasses import dataclass


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


# kvCacheDtype values that keep the packed records (vLLM maps auto / fp8 to fp8_ds_mla for these
# models) and those that store BF16 latents.
PACKED_KV_DTYPES = frozenset({"auto", "fp8", "fp8_e4m3", "fp8_ds_mla", "nvfp4_ds_mla"})
BF16_KV_DTYPES = frozenset({"bfloat16", "bf16"})


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


def v4_all_groups(ratios: tuple[int, ...]) -> dict[str, tuple[KvGroup, ...]]:
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


def v4_records(ratios: tuple[int, ...], bytes_per_state: int) -> tuple[KvRecord, ...]:
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


# V4.1-Flash's per-token estimate, kept only where catalog/kv_layout_v41.py has no layout (V4.1
# speculative decoding, PP / PCP / DCP, GPUs other than SM90 / SM100); it holds more requests than
# vLLM's own groups. From models/deepseek_v41/attention.py + compressor.py (0.33.0): 40
# layers, a 528 B MXFP8 sliding-window record per layer; the compressed KV is shared across layers (only kv-source
# layers own a cache) in 288 B nvfp4_ds_mla records: DeepSeek's own figure is 890 B of global KV
# per token over all kv sources and their indexers, taken here as one record of 890 B per token.
# The compressor keeps a CircularBufferSpec of max(8, next power of two of drafts + 2) rows of
# fp32 2 * 2 * 512 per request and layer. INFERRED: window 128 like V4; the global figure's
# split into sources is not needed for the per-request sum.
V41_FLASH_PACKED = (
    KvRecord("swa", 40, 528, window=128),
    KvRecord("global", 1, 890),
    KvRecord("compressor-ring", 40, 2 * 2 * 512 * 4, circular_rows=8),
)
V41_FLASH_BF16 = (
    KvRecord("swa", 40, 1024, window=128),
    KvRecord("global", 1, 890 * 1024 // 288),
    KvRecord("compressor-ring", 40, 2 * 2 * 512 * 4, circular_rows=8),
)
