"""vLLM's own KV-cache arithmetic for DeepSeek V4 layouts, for one release, in one process.

Run with a release's virtualenv python from the repository root; reads a JSON array of cases on
stdin, writes a JSON object with one answer per case (same order) on stdout:

    ~/.cache/deepseek-operator/vllm/0.33.0/bin/python -m conformance.capacity_oracle < cases.json

A case: `{"id", "architecture", "kv_cache_dtype", "max_model_len", "max_num_batched_tokens",
"tensor_parallel_size", "data_parallel_size", "available": [bytes, ...]}`.

How the specs are built on CPU: the release's own cache layers (`DeepseekV4SWACache`,
`CompressorStateCache`, `DeepseekV4IndexerCache`) are constructed per layer of V4-Flash's
compress ratios with the arguments `DeepseekV4Attention.__init__` / `DeepseekCompressor.__init__` /
`DeepseekV4Indexer.__init__` pass them (head_dim 512, window 128, state_dim 2 x coff x head_dim,
indexer head 128 + 4 scale bytes per 128), and the compressed-KV spec comes from
`DeepseekV4Attention.get_kv_cache_spec` itself. The attention class is the release's CUDA class
for the KV dtype (FlashMLA for the packed fp8_ds_mla layout, FlashInfer MLA for bf16), whose
`use_fp8_ds_mla_layout` goes through the release's `_resolve_dsv4_kv_cache_dtype`; the block size
is that class's backend's own `get_supported_kernel_block_sizes()`. The attention layers
themselves are not constructed: their linear layers, CUDA events and streams need a GPU.

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
import json
import sys
from types import SimpleNamespace
from typing import Any
from unittest import mock

from conformance import fake_platform, vllm_cli  # noqa: F401  (CPU platform first)

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
# V4-Flash (HF config): compress ratios per layer, head_dim, sliding window, indexer head.
V4_FLASH_RATIOS = [0, 0, 4] + [128, 4] * 20
HEAD_DIM = 512
WINDOW = 128
INDEX_HEAD_DIM = 128
INDEX_QUANT_BLOCK = 128  # DeepseekV4Indexer.quant_block_size


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
            async_scheduling=True,
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
        for index, ratio in enumerate(V4_FLASH_RATIOS + drafts):
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


def spec_summary(spec: Any) -> dict[str, Any]:
    """The figures of one per-layer spec that capacity depends on."""
    kind = "sliding" if hasattr(spec, "sliding_window") and spec.sliding_window else "full"
    if type(spec).__name__ == "CircularBufferSpec":
        kind = "circular"
    return {
        "kind": kind,
        "block_size": int(spec.block_size),
        "page_bytes": int(spec.page_size_bytes),
        "window": int(spec.sliding_window) if kind == "sliding" else None,
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


def answer(case: dict[str, Any]) -> dict[str, Any]:
    """vLLM's groups, blocks and concurrency for one case."""
    if case["architecture"] != V4_ARCH:
        return {"id": case["id"], "error": f"no CPU spec builder for {case['architecture']}"}
    specs, config, backends = v4_specs(case)
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
