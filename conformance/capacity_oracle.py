"""vLLM's own KV-cache arithmetic for DeepSeek V4 layouts, for one release, in one process.

Run with a release's virtualenv python from the repository root; reads a JSON array of cases on
stdin, writes a JSON object with one answer per case (same order) on stdout:

    ~/.cache/deepseek-operator/vllm/0.33.0/bin/python -m conformance.capacity_oracle < cases.json

A case: `{"id", "architecture", "kv_cache_dtype", "max_model_len", "max_num_batched_tokens",
"tensor_parallel_size", "data_parallel_size", "available": [bytes, ...]}` (a V4 case may add the
checkpoint's `compress_ratios`, default V4-Flash's, and `async_scheduling`, default true); a V4.1 case
(`DeepseekV41ForCausalLM`) may add `gpu_capability` ([major, minor], default [10, 0]) and
`attention_backend` (an `AttentionBackendEnum` name; default: the release's own choice, with
mega attention's kernel check answered as on a GPU build, so SM100 gets mega attention where its
topology test passes); the answer names the attention class. A `{"id", "kind": "mega_experts",
"num_experts", "num_local_experts", "top_k", "hidden_size", "intermediate_size"}` case is answered
with the bytes of the parameters the release's MegaMoE expert class creates for one rank, built
on the meta device.

How the specs are built on CPU: the release's own cache layers (`DeepseekV4SWACache`,
`CompressorStateCache`, `DeepseekV4IndexerCache`) are constructed per layer of the checkpoint's
compress ratios (V4-Flash's, or V4-Pro's) with the arguments `DeepseekV4Attention.__init__` / `DeepseekCompressor.__init__` /
`DeepseekV4Indexer.__init__` pass them (head_dim 512, window 128, state_dim 2 x coff x head_dim,
indexer head 128 + 4 scale bytes per 128), and the compressed-KV spec comes from
`DeepseekV4Attention.get_kv_cache_spec` itself. The attention class is the release's CUDA class
for the KV dtype (FlashMLA for the packed fp8_ds_mla layout, FlashInfer MLA for bf16), whose
`use_fp8_ds_mla_layout` goes through the release's `_resolve_dsv4_kv_cache_dtype`; the block size
is that class's backend's own `get_supported_kernel_block_sizes()`. The attention layers
themselves are not constructed: their linear layers, CUDA events and streams need a GPU.

V4.1-Flash's specs come the same way from the release's models/deepseek_v41/ cache layers
(`DeepseekV4SWACache` with V4.1's 32-token blocks and packed records, the kv-source layers'
`DeepseekV4Attention.get_kv_cache_spec`, their `CompressorStateCache` rings and indexer K
caches), laid out by the checkpoint's kv-source / index-source layer pattern, under a faked GPU:
the record (528 B MXFP8 on SM100, else V4's 584 B), the block size and the attention class
(`_select_dsv4_attn_cls`; mega attention brings the 288 B nvfp4 compressed record) depend on it.
Arguments a release's SWA cache lacks (0.30.0-0.32.0) are left out by its signature.

The specs then go through the release's own planner: the KV cache layout from
`resolve_kv_cache_layout` over the backends' supported layouts, `get_global_kv_cache_groups`,
`get_kv_cache_configs` per available figure, and `get_max_concurrency_for_kv_cache_config`
(v1/core/kv_cache_utils.py). Where the planner lives is found by feature, not by version: 0.33.0
has it in v1/core/kv_cache_planning.py with the grouping split off (`get_global_kv_cache_groups`);
0.30.0-0.32.0 have it in v1/core/kv_cache_utils.py, whose `get_kv_cache_configs(config, specs,
available)` groups the layers itself, so the groups are read off the config it returns. The
VllmConfig is a stand-in carrying the real `CacheConfig` and the
real VllmConfig properties the planner reads (`max_in_flight_tokens`, `max_concurrent_batches`,
`num_prefill_lookahead_tokens`).
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import sys
from types import SimpleNamespace
from typing import Any
from unittest import mock

from conformance import fake_platform, vllm_cli  # CPU platform first

# isort: split
import torch
from vllm.config import CacheConfig, VllmConfig

attention = importlib.import_module("vllm.models.deepseek_v4.attention")
compressor = importlib.import_module("vllm.models.deepseek_v4.compressor")
sparse_swa = importlib.import_module("vllm.v1.attention.backends.mla.sparse_swa")
flashmla = importlib.import_module("vllm.models.deepseek_v4.nvidia.flashmla")
flashinfer = importlib.import_module("vllm.models.deepseek_v4.nvidia.flashinfer_sparse")
kv_utils = importlib.import_module("vllm.v1.core.kv_cache_utils")
backend_utils = importlib.import_module("vllm.v1.attention.backends.utils")
# 0.33.0 moved the planner out of kv_cache_utils into kv_cache_planning and split the grouping
# (get_global_kv_cache_groups) off get_kv_cache_configs; 0.30.0-0.32.0 plan in kv_cache_utils,
# where get_kv_cache_configs(config, specs, available) groups the layers itself.
try:
    planning = importlib.import_module("vllm.v1.core.kv_cache_planning")
except ModuleNotFoundError:
    planning = kv_utils
GLOBAL_GROUPS = getattr(planning, "get_global_kv_cache_groups", None)

V4_ARCH = "DeepseekV4ForCausalLM"
# V4-Flash (HF config): compress ratios per layer, head_dim, sliding window, indexer head. A case
# may give another V4 checkpoint's `compress_ratios` (V4-Pro: 61 layers, [128, 128, 4] +
# [128, 4] * 29); head, window and indexer dimensions are the same.
V4_FLASH_RATIOS = [0, 0, 4] + [128, 4] * 20
HEAD_DIM = 512
WINDOW = 128
INDEX_HEAD_DIM = 128
INDEX_QUANT_BLOCK = 128  # DeepseekV4Indexer.quant_block_size

V41_ARCH = "DeepseekV41ForCausalLM"
# V4.1-Flash (the checkpoint's config.json, text_config): 40 backbone layers whose compress ratios
# are 0 (sliding window only), 2 and 1; only the kv-source layers own a compressor and a
# compressed-KV cache, the index-source layers an indexer (the kv sources among them own its K
# cache); every other layer reads the latest source below it. 64 heads in 8 output groups.
V41_FLASH_RATIOS = [0, 0] + [2] * 18 + [1] * 20
V41_KV_SOURCES = (2, 8, 14, 20)
V41_INDEX_SOURCES = (2, 8, 14, 20, 24, 28, 32, 36)
V41_HEADS, V41_O_GROUPS = 64, 8
V41_SWA_BLOCK = 32  # DeepseekV4Attention.__init__ passes block_size=32 to its SWA cache


def speculative_config(case: dict[str, Any]) -> SimpleNamespace | None:
    """An MTP SpeculativeConfig stand-in whose predicates are vLLM's own (V4-Flash: one MTP
    module, ``num_nextn_predict_layers`` 1)."""
    drafts = case.get("num_speculative_tokens", 0)
    if not drafts:
        return None
    import dataclasses

    from vllm.config import SpeculativeConfig

    # vLLM's own methods and properties on a namespace of the dataclass's own defaults (its
    # constructor resolves the draft model from the hub).
    own = {
        name: value
        for name, value in vars(SpeculativeConfig).items()
        if not name.startswith("__") and (callable(value) or isinstance(value, property))
    }
    stand_in_cls = type("StandInSpeculative", (SimpleNamespace,), own)
    values = {
        f.name: f.default
        for f in dataclasses.fields(SpeculativeConfig)
        if f.default is not dataclasses.MISSING
    }
    values.update(
        method="mtp",
        num_speculative_tokens=drafts,
        draft_model_config=SimpleNamespace(hf_config=SimpleNamespace(num_nextn_predict_layers=1)),
    )
    return stand_in_cls(**values)  # type: ignore[no-any-return]


class StandInConfig(SimpleNamespace):
    """A VllmConfig stand-in: the planner's VllmConfig properties are vLLM's own."""

    max_concurrent_batches = VllmConfig.max_concurrent_batches
    max_in_flight_tokens = VllmConfig.max_in_flight_tokens
    num_speculative_tokens = VllmConfig.num_speculative_tokens
    # 0.31.0 on (0.30.0 derives the retained lookahead from the SpeculativeConfig itself).
    if hasattr(VllmConfig, "num_prefill_lookahead_tokens"):
        num_prefill_lookahead_tokens = VllmConfig.num_prefill_lookahead_tokens


def attention_class(kv_cache_dtype: str) -> Any:
    """The release's CUDA V4 attention class for the KV dtype (bf16 needs the plain-row layout)."""
    if kv_cache_dtype in ("bfloat16", "bf16"):
        return flashinfer.DeepseekV4FlashInferMLAAttention
    return flashmla.DeepseekV4FlashMLAAttention


def stand_in(case: dict[str, Any], block_size: int, cache_dtype: str) -> StandInConfig:
    """The config the cache layers and the planner read."""
    return StandInConfig(
        use_v2_model_runner=False,
        diffusion_config=None,
        kv_transfer_config=None,
        speculative_config=speculative_config(case),
        compilation_config=SimpleNamespace(static_forward_context={}),
        cache_config=CacheConfig(block_size=block_size, cache_dtype=cache_dtype),
        model_config=SimpleNamespace(
            max_model_len=case["max_model_len"],
            original_max_model_len=case["max_model_len"],
            supports_kv_cache_grouping=False,
            # 0.30.0's planner flags the MTP draft group by model type (_is_deepseek_v4_eagle).
            hf_config=SimpleNamespace(model_type="deepseek_v4"),
        ),
        scheduler_config=SimpleNamespace(
            max_num_batched_tokens=case["max_num_batched_tokens"],
            disable_hybrid_kv_cache_manager=False,
            async_scheduling=case.get("async_scheduling", True),
            max_num_seqs=256,
        ),
        parallel_config=SimpleNamespace(
            tensor_parallel_size=case["tensor_parallel_size"],
            data_parallel_size=case["data_parallel_size"],
            pipeline_parallel_size=1,
            decode_context_parallel_size=1,
            prefill_context_parallel_size=1,
        ),
        attention_config=SimpleNamespace(hisparse_config=None),
    )


def v4_specs(case: dict[str, Any]) -> tuple[dict[str, Any], StandInConfig, list[Any]]:
    """Every KV cache spec of V4-Flash's layers, built by the release's own cache layers."""
    cls = attention_class(case["kv_cache_dtype"])
    block_size = int(cls.backend_cls.get_supported_kernel_block_sizes()[0])
    dtype = case["kv_cache_dtype"]
    config = stand_in(case, block_size, dtype)
    # vLLM's own dtype resolution (it writes fp8_ds_mla back onto the cache config).
    kv_dtype, torch_dtype = attention._resolve_dsv4_kv_cache_dtype(
        cls.use_fp8_ds_mla_layout, config.cache_config.cache_dtype, config.cache_config
    )
    specs: dict[str, Any] = {}
    current = mock.patch.multiple
    with (
        current(sparse_swa, get_current_vllm_config=lambda: config),
        current(attention, get_current_vllm_config=lambda: config),
        current(compressor, get_current_vllm_config=lambda: config),
    ):
        # The MTP draft layer (index num_hidden_layers) has compress ratio 1: a SWA cache only.
        drafts = [1] if config.speculative_config is not None else []
        for index, ratio in enumerate(list(case.get("compress_ratios", V4_FLASH_RATIOS)) + drafts):
            prefix = f"model.layers.{index}.attn"
            swa = sparse_swa.DeepseekV4SWACache(
                head_dim=HEAD_DIM,
                window_size=WINDOW,
                dtype=torch_dtype,
                prefix=f"{prefix}.swa_cache",
                cache_config=config.cache_config,
                backend_cls=cls.swa_backend_cls,
            )
            specs[swa.prefix] = swa.get_kv_cache_spec(config)
            if ratio <= 1:
                continue
            layer = SimpleNamespace(
                compress_ratio=ratio,
                kv_cache_dtype=kv_dtype,
                head_dim=HEAD_DIM,
                kv_cache_torch_dtype=torch_dtype,
            )
            specs[prefix] = attention.DeepseekV4Attention.get_kv_cache_spec(layer, config)
            coff = 1 + (ratio == 4)
            state = compressor.CompressorStateCache(
                state_dim=2 * coff * HEAD_DIM,
                dtype=torch.float32,
                compress_ratio=ratio,
                prefix=f"{prefix}.compressor.state_cache",
            )
            specs[state.prefix] = state.get_kv_cache_spec(config)
            if ratio != 4:
                continue
            k_cache = attention.DeepseekV4IndexerCache(
                head_dim=INDEX_HEAD_DIM + INDEX_HEAD_DIM // INDEX_QUANT_BLOCK * 4,
                dtype=torch.uint8,
                prefix=f"{prefix}.indexer.k_cache",
                cache_config=config.cache_config,
                compress_ratio=ratio,
            )
            specs[k_cache.prefix] = k_cache.get_kv_cache_spec(config)
            index_state = compressor.CompressorStateCache(
                state_dim=2 * coff * INDEX_HEAD_DIM,
                dtype=torch.float32,
                compress_ratio=ratio,
                prefix=f"{prefix}.indexer.compressor.state_cache",
            )
            specs[index_state.prefix] = index_state.get_kv_cache_spec(config)
    backends = [cls.backend_cls, cls.swa_backend_cls, compressor.CompressorBackend]
    backends.append(attention.DeepseekV4IndexerBackend)
    return specs, config, backends


def _v41_attention_class(config: StandInConfig) -> Any:
    """The class the release's own `_select_dsv4_attn_cls` picks, as on a GPU whose vLLM build
    has mega attention's kernels: on CPU `is_flashmla_mega_attn_supported` finds no
    `_flashmla_C` ops, so it is answered as a GPU build would (its own SM100 check kept)."""
    from vllm.platforms import current_platform

    v41_model = importlib.import_module("vllm.models.deepseek_v41.nvidia.model")
    try:  # 0.31.0 on; 0.30.0 has no mega attention
        mega = importlib.import_module("vllm.models.deepseek_v41.nvidia.flash_mla_mega_attn")
    except ModuleNotFoundError:
        return v41_model._select_dsv4_attn_cls(config)

    def built() -> tuple[bool, str | None]:
        return current_platform.is_device_capability_family(100), None

    with mock.patch.object(mega, "is_flashmla_mega_attn_supported", built):
        return v41_model._select_dsv4_attn_cls(config)


def v41_specs(case: dict[str, Any]) -> tuple[dict[str, Any], StandInConfig, list[Any]]:
    """Every KV cache spec of V4.1-Flash's backbone layers, built by the release's own cache
    layers with the arguments models/deepseek_v41/attention.py's `DeepseekV4Attention.__init__`
    passes them. The attention class is the one the release's own `_select_dsv4_attn_cls` picks
    for the case's attention backend (None: its default) on the faked GPU; call within
    `fake_platform.device_capability` (the records, the block size and mega attention depend on
    the GPU)."""
    v41 = importlib.import_module("vllm.models.deepseek_v41.attention")
    v41_compressor = importlib.import_module("vllm.models.deepseek_v41.compressor")
    indexer = importlib.import_module("vllm.v1.attention.backends.mla.indexer")
    from vllm.config import AttentionConfig
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    dtype = case["kv_cache_dtype"]
    config = stand_in(case, 16, dtype)  # the block size is the attention backend's, below
    backend = case.get("attention_backend")
    config.attention_config = AttentionConfig(
        backend=AttentionBackendEnum[backend] if backend else None
    )
    config.model_config.hf_config = SimpleNamespace(
        model_type="deepseek_v41", num_attention_heads=V41_HEADS, o_groups=V41_O_GROUPS
    )
    cls = _v41_attention_class(config)
    config.cache_config.block_size = int(cls.backend_cls.get_supported_kernel_block_sizes()[0])
    # The layer's own properties, read off a bare instance (no constructor: it needs a GPU).
    layer = object.__new__(cls)
    # 0.31.0 on: the layer names the packed record an unspecific dtype resolves to (mega
    # attention: nvfp4_ds_mla); 0.30.0 always resolves to fp8_ds_mla.
    preferred = [layer.packed_kv_cache_dtype] if hasattr(cls, "packed_kv_cache_dtype") else []
    kv_dtype, torch_dtype = v41._resolve_dsv4_kv_cache_dtype(
        layer._uses_fp8_ds_mla_layout(),
        config.cache_config.cache_dtype,
        config.cache_config,
        *preferred,
    )
    mxfp8 = v41._use_v41_mxfp8_kv_record()
    swa_bytes = 528 if mxfp8 else 584
    compressed_bytes = 288 if kv_dtype == "nvfp4_ds_mla" else swa_bytes
    alignment = 512 if mxfp8 else 576
    # Arguments later releases added (0.32.0: bounded replay, 0.33.0: the block stride shared
    # with the compressed record), passed where the release's SWA cache takes them.
    swa_extra = {
        "packed_block_stride_alignment": math.lcm(swa_bytes, compressed_bytes) if mxfp8 else None,
        # Bounded replay needs model runner V2 and changes prefix caching, not bytes.
        "bounded_replay": False,
    }
    accepted = inspect.signature(sparse_swa.DeepseekV4SWACache.__init__).parameters
    swa_extra = {k: v for k, v in swa_extra.items() if k in accepted}
    specs: dict[str, Any] = {}
    owners: list[Any] = []
    current = mock.patch.multiple
    with (
        current(sparse_swa, get_current_vllm_config=lambda: config),
        current(v41, get_current_vllm_config=lambda: config),
        current(v41_compressor, get_current_vllm_config=lambda: config),
    ):
        for index, ratio in enumerate(V41_FLASH_RATIOS):
            prefix = f"model.layers.{index}.attn"
            swa = sparse_swa.DeepseekV4SWACache(
                head_dim=HEAD_DIM,
                window_size=WINDOW,
                dtype=torch_dtype,
                prefix=f"{prefix}.swa_cache",
                cache_config=config.cache_config,
                backend_cls=cls.swa_backend_cls,
                block_size=V41_SWA_BLOCK,
                packed_bytes_per_token=swa_bytes,
                packed_page_alignment=alignment,
                **swa_extra,
            )
            specs[swa.prefix] = swa.get_kv_cache_spec(config)
            owners.append(swa)
            if index not in V41_KV_SOURCES:
                continue
            source = SimpleNamespace(
                is_kv_source=True,
                kv_cache_dtype=kv_dtype,
                head_dim=HEAD_DIM,
                compress_ratio=ratio,
                kv_cache_torch_dtype=torch_dtype,
                kv_page_alignment=alignment,
                compressed_bytes_per_token=compressed_bytes,
                kv_bytes_per_token=compressed_bytes,  # 0.30.0's name for the record width
            )
            specs[prefix] = v41.DeepseekV4Attention.get_kv_cache_spec(source, config)
            if ratio > 1:  # DeepseekCompressor: a state ring for ratios above 1
                state = v41_compressor.CompressorStateCache(
                    state_dim=2 * HEAD_DIM,
                    dtype=torch.float32,
                    prefix=f"{prefix}.compressor.state_cache",
                )
                specs[state.prefix] = state.get_kv_cache_spec(config)
                owners.append(state)
            if index in V41_INDEX_SOURCES:  # a kv source owns its indexer's K cache
                k_cache = v41.DeepseekV4IndexerCache(
                    head_dim=v41._indexer_k_cache_head_dim(
                        INDEX_HEAD_DIM, indexer.dsa_indexer_uses_fp4(config)
                    ),
                    dtype=torch.uint8,
                    prefix=f"{prefix}.indexer.k_cache",
                    cache_config=config.cache_config,
                    compress_ratio=ratio,
                )
                specs[k_cache.prefix] = k_cache.get_kv_cache_spec(config)
                owners.append(k_cache)
    backends = [cls.backend_cls, *dict.fromkeys(o.get_attn_backend() for o in owners)]
    config.attention_class = cls.__name__
    return specs, config, backends


def spec_summary(spec: Any) -> dict[str, Any]:
    """The figures of one per-layer spec that capacity depends on."""
    kind = "sliding" if hasattr(spec, "sliding_window") and spec.sliding_window else "full"
    if type(spec).__name__ == "CircularBufferSpec":
        kind = "circular"
    # The bytes a block's stride must be a multiple of (0.33.0's block_stride_alignment; the
    # planner rounds the block up to their lcm); releases without the field align to 1.
    stride = spec.get_block_stride_alignment() if hasattr(spec, "get_block_stride_alignment") else 1
    return {
        "kind": kind,
        "block_size": int(spec.block_size),
        "page_bytes": int(spec.page_size_bytes),
        "window": int(spec.sliding_window) if kind == "sliding" else None,
        "stride_alignment": int(stride),
    }


# Bytes no KV pool reaches: where a release groups inside get_kv_cache_configs, the groups are
# read off a pool of this size (the grouping does not depend on the bytes available).
UNBOUNDED = 1 << 60


def plan_groups(config: StandInConfig, specs: dict[str, Any]) -> list[Any]:
    """The release's KV cache groups of the whole model (one worker's specs)."""
    if GLOBAL_GROUPS is not None:
        return list(GLOBAL_GROUPS(config, [specs]))
    return list(planning.get_kv_cache_configs(config, [specs], [UNBOUNDED])[0].kv_cache_groups)


def plan_pool(
    config: StandInConfig, specs: dict[str, Any], available: int, groups: list[Any]
) -> Any:
    """The release's KV cache config for one worker with `available` bytes."""
    if GLOBAL_GROUPS is not None:
        return planning.get_kv_cache_configs(config, [specs], [available], groups)[0]
    return planning.get_kv_cache_configs(config, [specs], [available])[0]


def mega_experts_bytes(case: dict[str, Any]) -> dict[str, Any]:
    """Bytes of the parameters the release's MegaMoE expert class creates for one rank's routed
    experts, constructed on the meta device (no memory): `DeepGemmMegaMoEExperts` (0.33.0, MXFP4
    format, no shared expert) or `DeepseekV4MegaMoEExperts` (0.30.0-0.32.0). Its own device and
    SM100 shape checks run on a faked SM100 GPU."""
    try:
        mod = importlib.import_module("vllm.model_executor.layers.fused_moe.deep_gemm_mega_moe")
        cls = mod.DeepGemmMegaMoEExperts
    except (ModuleNotFoundError, AttributeError):
        mod = importlib.import_module("vllm.models.deepseek_v4.nvidia.model")
        cls = mod.DeepseekV4MegaMoEExperts
    config = SimpleNamespace(
        scheduler_config=SimpleNamespace(max_num_batched_tokens=8192),
        compilation_config=SimpleNamespace(static_forward_context={}),
    )
    kwargs: dict[str, Any] = {
        "num_experts": case["num_experts"],
        "num_local_experts": case["num_local_experts"],
        "experts_start_idx": 0,
        "top_k": case["top_k"],
        "hidden_size": case["hidden_size"],
        "intermediate_size": case["intermediate_size"],
        "prefix": "model.layers.3.ffn.experts",
    }
    if "weight_format" in inspect.signature(cls.__init__).parameters:
        kwargs["weight_format"] = mod.MEGA_MOE_MXFP4
        kwargs["activation"] = mod.MegaMoEActivation("swiglu", clamp=None)
    with (
        fake_platform.device_capability(10, 0),
        torch.device("meta"),
        # Meta is not the platform's device: the class asks the accelerator for its index.
        mock.patch.object(torch.accelerator, "current_device_index", lambda: 0),
    ):
        experts = cls(config, **kwargs)
    params = dict(experts.named_parameters())
    return {
        "id": case["id"],
        "class": cls.__name__,
        "bytes": sum(p.numel() * p.element_size() for p in params.values()),
        "parameters": sorted(params),
    }


def answer(case: dict[str, Any]) -> dict[str, Any]:
    """vLLM's groups, blocks and concurrency for one case (or, for a `mega_experts` case, the
    bytes of one rank's MegaMoE expert parameters)."""
    if case.get("kind") == "mega_experts":
        return mega_experts_bytes(case)
    if case["architecture"] == V41_ARCH:
        with fake_platform.device_capability(*case.get("gpu_capability", (10, 0))):
            return plan(case, *v41_specs(case))
    if case["architecture"] != V4_ARCH:
        return {"id": case["id"], "error": f"no CPU spec builder for {case['architecture']}"}
    return plan(case, *v4_specs(case))


def plan(
    case: dict[str, Any], specs: dict[str, Any], config: StandInConfig, backends: list[Any]
) -> dict[str, Any]:
    """The release's planner over one worker's specs: groups, blocks and concurrency."""
    supported = [x.name for x in backend_utils.get_supported_kv_cache_layouts(backends)]
    backend_utils.resolve_kv_cache_layout(config, [supported], specs.values())
    groups = plan_groups(config, specs)
    summary = []
    blocks_per_request = 0
    for group in groups:
        counts: dict[str, int] = {}
        for name in group.layer_names:
            key = json.dumps(spec_summary(group.kv_cache_spec.kv_cache_specs[name]))
            counts[key] = counts.get(key, 0) + 1
        summary.append([[json.loads(k), n] for k, n in sorted(counts.items())])
        blocks_per_request += kv_utils.cdiv(
            group.kv_cache_spec.max_memory_usage_bytes(config),
            group.kv_cache_spec.page_size_bytes,
        )
    pools = []
    for available in case["available"]:
        try:
            kv_config = plan_pool(config, specs, available, groups)
        except ValueError as exc:  # not enough KV memory for one request at max_model_len
            pools.append({"available": available, "refused": str(exc)[:300]})
            continue
        tokens, concurrency = kv_utils.get_kv_cache_capacity(config, kv_config)
        pools.append(
            {
                "available": available,
                "num_blocks": kv_config.num_blocks,
                "max_concurrency": concurrency,
                "tokens": tokens,
            }
        )
    return {
        "id": case["id"],
        "attention_class": getattr(config, "attention_class", None),
        "groups": summary,
        "blocks_per_request": blocks_per_request,
        "pools": pools,
    }


def main() -> int:
    """Answer every case read from stdin."""
    cases = json.load(sys.stdin)
    answers = []
    for case in cases:
        try:
            answers.append(answer(case))
        except Exception as exc:  # the oracle itself failed: report, never hide
            answers.append({"id": case["id"], "error": f"{type(exc).__name__}: {exc}"[:400]})
    json.dump({"release": vllm_cli.release(), "answers": answers}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
