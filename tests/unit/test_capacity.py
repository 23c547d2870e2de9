"""The capacity model: calibration on the MegaMoE PR's figures, and the decisions built on it."""

from __future__ import annotations

import pytest

from deepseek_operator.catalog.gpu_memory import GIB, MIB
from deepseek_operator.engine import capacity as C
from deepseek_operator.engine import capacity_report as R
from deepseek_operator.engine import kv_cache as K
from deepseek_operator.engine.decision import resolve
from deepseek_operator.engine.model_facts import model_facts
from tests.unit.factories import gb200_pool, spec

GB200 = C.GpuType("NVIDIA-GB200", 189471 * MIB, "test")
H200 = C.GpuType("NVIDIA-H200", 143771 * MIB, "test")


def _cap(release: str, mega: bool, gpu: C.GpuType = GB200, **overrides: object) -> C.Capacity:
    s = spec(**overrides)
    cap = C.capacity(s, model_facts(s.model), release, mega, gpu)
    assert isinstance(cap, C.Capacity), cap
    return cap


@pytest.mark.parametrize(("mega", "measured"), [(False, 71.03), (True, 81.46)])
def test_calibration_reproduces_the_megamoe_prs_gib_per_gpu_within_3_percent(
    mega: bool, measured: float
) -> None:
    # vllm#57220: V4.1-Flash at TP4 / EP4 on a GB200 tray, before vllm#57204 (0.32.0 here).
    weights = _cap("0.32.0", mega).weights
    assert abs(weights.total / GIB - measured) / measured < 0.03, weights.total / GIB


def test_the_prs_component_breakdown() -> None:
    w = _cap("0.32.0", True).weights
    # Padding 2304 -> 2560 of the routed FP4 experts (7.03 GiB) plus their scales.
    assert 7.0 < w.padding / GIB < 7.6
    assert round(w.retained_shared / GIB, 2) == 1.32
    assert round(w.replicated_shared / GIB, 2) == 0.99


def test_0_33_0_neither_pads_nor_retains_but_still_replicates_the_shared_expert() -> None:
    w = _cap("0.33.0", True).weights
    assert w.padding == 0 and w.retained_shared == 0
    assert round(w.replicated_shared / GIB, 2) == 0.99


def test_megamoe_leaves_less_kv_room_and_fewer_requests() -> None:
    fused, mega = _cap("0.33.0", False), _cap("0.33.0", True)
    assert mega.symmetric_buffer > 0 and fused.symmetric_buffer == 0
    assert mega.kv_bytes < fused.kv_bytes
    assert mega.concurrent_requests < fused.concurrent_requests


def test_dp_holds_more_requests_than_tp_on_the_same_gpus() -> None:
    tp = _cap("0.33.0", False, parallelism={"tensorParallelSize": 4, "dataParallelSize": 1})
    dp = _cap("0.33.0", False, parallelism={"tensorParallelSize": 1, "dataParallelSize": 4})
    # KV is replicated over TP ranks; each DP rank has its own pool.
    assert dp.dp_ranks == 4 and dp.concurrent_requests > 2.5 * tp.concurrent_requests


def test_batched_tokens_grow_the_per_request_sliding_window_reservation() -> None:
    small = _cap("0.33.0", False, engine={"maxNumBatchedTokens": 1024})
    large = _cap("0.33.0", False, engine={"maxNumBatchedTokens": 32768})
    assert large.per_request_bytes > small.per_request_bytes
    # And nothing else moved the per-request figure: the window records are what grew.
    assert small.max_model_len == large.max_model_len


def test_v4_and_v41_kv_records_differ() -> None:
    v4 = _cap("0.33.0", False, H200, model={"name": "deepseek-ai/DeepSeek-V4-Flash"})
    v41 = _cap("0.33.0", False, H200)
    assert v4.per_request_bytes > 2 * v41.per_request_bytes


# vLLM 0.33.0's own planner on V4-Flash's cache layers (conformance/capacity_oracle.py): 60 GiB
# of KV room at 1M context / 8K batched tokens (packed fp8_ds_mla), and at 32K / 2K (bf16).
V4_FLASH = "deepseek-ai/DeepSeek-V4-Flash"


@pytest.mark.parametrize(
    ("family", "length", "batched", "expected"),
    [
        ("packed", 1_048_576, 8192, (1_002_240, 10_778, 64_280, 5.964000742252737)),
        ("bf16", 32_768, 2048, (1_600_000, 1_818, 40_265, 22.14796479647965)),
    ],
)
def test_v4_block_pool_equals_vllms_planner(
    family: str, length: int, batched: int, expected: tuple[int, int, int, float]
) -> None:
    from deepseek_operator.catalog.geometry import find_geometry

    geometry = find_geometry(V4_FLASH)
    assert geometry is not None and geometry.kv_groups is not None
    block, per_request, blocks = K.kv_blocks(
        geometry.kv_groups[family], 60 * GIB, length, 2 * batched, 1, 1
    )
    assert (block, per_request, blocks, K.pool_concurrency(blocks, per_request)) == expected


def test_mtp_adds_the_draft_layers_window_cache_without_changing_the_pool() -> None:
    # vLLM 0.33.0: the draft layer (compress ratio 1) brings a 44th SWA cache, grouped 22 + 22;
    # the largest group's page, and so the blocks, stay the same.
    plain = _cap("0.33.0", False, H200, model={"name": V4_FLASH})
    mtp = _cap(
        "0.33.0",
        False,
        H200,
        model={"name": V4_FLASH},
        engine={"speculativeConfig": {"method": "mtp", "num_speculative_tokens": 2}},
    )
    assert mtp.blocks_per_request == plain.blocks_per_request
    from deepseek_operator.catalog.geometry import find_geometry

    geometry = find_geometry(V4_FLASH)
    assert geometry is not None and geometry.kv_groups is not None
    swa = [g.layers[0][1] for g in geometry.kv_groups["packed+mtp"][:2]]
    assert swa == [22, 22]


def test_the_pool_keeps_a_null_block_so_one_request_needs_one_block_more() -> None:
    # vLLM refuses to start below blocks_per_request + 1 blocks (_check_enough_kv_cache_memory).
    assert K.pool_concurrency(10_778, 10_778) == 0.0
    assert K.pool_concurrency(10_779, 10_778) == 10_779 / 10_778


def test_v4_capacity_uses_the_block_pool() -> None:
    v4 = _cap("0.33.0", False, H200, model={"name": V4_FLASH})
    assert v4.num_blocks is not None and v4.blocks_per_request is not None
    assert v4.requests_per_rank == v4.num_blocks / v4.blocks_per_request


# vLLM's own planner on V4.1-Flash's cache layers (conformance/capacity_oracle.py, each release's
# _select_dsv4_attn_cls on a faked GPU): 60 GiB of KV room at 1M context / 8K batched tokens.
@pytest.mark.parametrize(
    ("release", "cc", "tp", "dtype", "attention", "expected"),
    [
        # Mega attention (SM100 default): 288 B NVFP4 compressed records; 0.33.0 rounds the block
        # up to lcm(528, 288) = 3168 B, 0.31.0-0.32.0 do not.
        ("0.33.0", 10, 4, None, "DeepseekV4MegaAttnAttention", (136_224, 10_778, 472_930)),
        ("0.32.0", 10, 4, None, "DeepseekV4MegaAttnAttention", (135_168, 10_778, 476_625)),
        # TP16 leaves 4 heads per wo_a group: mega declines, FlashMLA's 528 B MXFP8 records.
        ("0.33.0", 10, 16, None, "DeepseekV4FlashMLAAttention", (212_256, 10_261, 303_522)),
        # 0.30.0 has no mega attention.
        ("0.30.0", 10, 4, "fp8", "DeepseekV4FlashMLAAttention", (211_968, 10_261, 303_935)),
        # SM90: V4's 584 B records, 576 B pages, 64-token compressed blocks: 7 SWA groups.
        ("0.33.0", 9, 4, None, "DeepseekV4FlashMLAAttention", (116_928, 20_004, 550_975)),
        # bf16: FlashInfer's plain rows.
        (
            "0.33.0",
            10,
            4,
            "bfloat16",
            "DeepseekV4FlashInferMLAAttention",
            (370_688, 10_261, 173_797),
        ),
    ],
)
def test_v41_block_pool_equals_vllms_planner(
    release: str,
    cc: int,
    tp: int,
    dtype: str | None,
    attention: str,
    expected: tuple[int, int, int],
) -> None:
    from deepseek_operator.catalog.geometry import find_geometry

    geometry = find_geometry("deepseek-ai/DeepSeek-V4.1-Flash")
    assert geometry is not None
    engine = {"kvCacheDtype": dtype} if dtype else {}
    s = spec(parallelism={"tensorParallelSize": tp}, engine=engine)
    layout = K.kv_layout(geometry, s, release, cc)
    assert not isinstance(layout, str), layout
    assert layout[0].split(",")[0] == attention
    assert K.kv_blocks(layout[1], 60 * GIB, 1_048_576, 2 * 8192, 1, 1) == expected


def test_v41_capacity_uses_the_block_pool_on_the_gpus_compute_capability() -> None:
    gb200, h200 = _cap("0.33.0", False, GB200), _cap("0.33.0", False, H200)
    assert gb200.num_blocks is not None and gb200.blocks_per_request is not None
    assert gb200.kv_layout == "DeepseekV4MegaAttnAttention, nvfp4_ds_mla"
    assert h200.kv_layout == "DeepseekV4FlashMLAAttention, fp8_ds_mla"
    # V4's records on SM90 take twice the blocks per request (64-token compressed blocks).
    assert (
        h200.blocks_per_request is not None and h200.blocks_per_request > gb200.blocks_per_request
    )


def test_v41_layouts_not_modelled_fall_back_to_the_estimate_and_say_why() -> None:
    nvfp4_on_h200 = _cap("0.33.0", False, H200, engine={"kvCacheDtype": "nvfp4_ds_mla"})
    assert nvfp4_on_h200.num_blocks is None
    assert "nvfp4_ds_mla needs mega attention" in nvfp4_on_h200.kv_layout
    mtp = _cap(
        "0.33.0",
        False,
        GB200,
        engine={"speculativeConfig": {"method": "mtp", "num_speculative_tokens": 1}},
    )
    assert mtp.num_blocks is None and "speculative decoding" in mtp.kv_layout
    assert mtp.requests_per_rank == mtp.kv_bytes / mtp.per_request_bytes


def test_fixed_kv_budget_replaces_the_utilisation_figure() -> None:
    cap = _cap("0.33.0", False, engine={"kvCacheMemoryBytes": 10 * GIB})
    assert cap.kv_bytes == 10 * GIB and cap.fixed_kv_budget


def test_unknown_kv_dtype_and_checkpoint_are_named_not_guessed() -> None:
    s = spec(engine={"kvCacheDtype": "int3"})
    got = C.capacity(s, model_facts(s.model), "0.33.0", False, GB200)
    assert isinstance(got, C.Unknown) and "spec.engine.kvCacheDtype 'int3'" in got.reason
    s = spec(
        model={
            "name": "acme/DeepSeek-V4-Custom",
            "architecture": "DeepseekV4ForCausalLM",
            "expertDtype": "fp4",
            "hiddenSize": 4096,
            "moeIntermediateSize": 2048,
            "numRoutedExperts": 256,
        }
    )
    got = C.capacity(s, model_facts(s.model), "0.33.0", False, GB200)
    assert isinstance(got, C.Unknown) and "no capacity geometry" in got.reason


def test_status_check_and_what_if_line_for_the_seed() -> None:
    res = resolve(spec(image="vllm/vllm-openai:v0.33.0"), gb200_pool())
    assert res.moe_backend == "deep_gemm_mega_moe"
    check = next(c for c in res.checks if c.name == "KVCacheCapacity")
    assert check.passed and "NVIDIA-GB200" in check.message
    assert res.capacity is not None
    line = R.what_if(res.capacity)
    assert (
        line.startswith("NVIDIA-GB200: MegaMoE leaves ") and "less than the FusedMoE path" in line
    )


def test_auto_keeps_the_fused_path_when_megamoe_cannot_meet_min_concurrent_requests() -> None:
    s = spec(image="vllm/vllm-openai:v0.33.0")
    fused = R.report(s, model_facts(s.model), "0.33.0", False, (GB200,)).rows[0]
    mega = R.report(s, model_facts(s.model), "0.33.0", True, (GB200,)).rows[0]
    asked = int(mega.concurrent_requests) + 1
    assert fused.concurrent_requests >= asked  # the seed's trade-off: only MegaMoE falls short
    res = resolve(
        spec(image="vllm/vllm-openai:v0.33.0", capacity={"minConcurrentRequests": asked}),
        gb200_pool(),
    )
    assert res.moe_backend == "auto" and res.backend_runnable
    assert res.reason == "KVCacheCapacityFailed" and res.condition_reason == "KeptAuto"
    assert "the FusedMoE path holds it" in res.message
    # A layout the advice weighs (advise=False) skips the what-if figures, yet computes the
    # FusedMoE path's where the decision needs them: the same decision.
    weighed = resolve(
        spec(image="vllm/vllm-openai:v0.33.0", capacity={"minConcurrentRequests": asked}),
        gb200_pool(),
        advise=False,
    )
    assert weighed.condition_reason == "KeptAuto" and weighed.message == res.message
    assert weighed.capacity is not None and res.capacity is not None
    assert weighed.capacity.rows == res.capacity.rows
    assert weighed.capacity.other == res.capacity.other


def test_a_weighed_layout_carries_no_what_if_figures() -> None:
    s = spec(image="vllm/vllm-openai:v0.33.0")
    full, weighed = resolve(s, gb200_pool()), resolve(s, gb200_pool(), advise=False)
    assert full.capacity is not None and weighed.capacity is not None
    assert full.capacity.other and not weighed.capacity.other
    assert weighed.capacity.rows == full.capacity.rows


def test_explicit_backend_short_of_min_concurrent_requests_is_not_placeable() -> None:
    res = resolve(
        spec(
            image="vllm/vllm-openai:v0.33.0",
            moeBackend="deep_gemm_mega_moe",
            capacity={"minConcurrentRequests": 1000},
        ),
        gb200_pool(),
    )
    assert res.backend_runnable and not res.placement.placeable
    assert res.placement.reason == "KVCacheCapacityFailed"
    assert "cannot hold spec.capacity.minConcurrentRequests 1000" in res.placement.message


def test_a_spec_that_cannot_hold_one_request_is_refused_with_the_numbers_and_the_fix() -> None:
    res = resolve(
        spec(image="vllm/vllm-openai:v0.33.0", engine={"gpuMemoryUtilization": 0.4}),
        gb200_pool(),
    )
    assert not res.backend_runnable and res.reason == "KVCacheCapacityFailed"
    assert "GiB/GPU" in res.message and "fix: more GPUs per replica" in res.message
    assert res.requirement.kind.name == "NONE"


def test_a_fixed_kv_budget_is_rendered_and_may_not_be_repeated_in_extra_args() -> None:
    from deepseek_operator.errors import SpecError
    from deepseek_operator.render.argv import vllm_args

    s = spec(engine={"kvCacheMemoryBytes": 10 * GIB})
    args = vllm_args(s, resolve(s, gb200_pool()))
    assert args[args.index("--kv-cache-memory-bytes") + 1] == str(10 * GIB)
    with pytest.raises(SpecError, match="kv-cache-memory-bytes"):
        spec(engine={"kvCacheMemoryBytes": 1, "extraArgs": ["--kv-cache-memory-bytes", "2"]})


def test_status_capacity_lists_each_gpu_type() -> None:
    from deepseek_operator.render.status import build_status

    res = resolve(spec(image="vllm/vllm-openai:v0.33.0"), gb200_pool())
    status = build_status(res, generation=1, ready_replicas=0, now="2026-01-01T00:00:00Z")
    assert status.capacity is not None and len(status.capacity) == 1
    row = status.capacity[0]
    assert row.gpu_product == "NVIDIA-GB200" and row.backend == "deep_gemm_mega_moe"
    assert float(row.kv_cache_gib) > 0 and float(row.concurrent_requests) >= 1
    assert abs(row.tokens - float(row.concurrent_requests) * row.max_model_len) < row.max_model_len


def test_max_model_len_beyond_the_checkpoint_is_refused_in_one_line() -> None:
    res = resolve(spec(engine={"maxModelLen": 2_000_000}), gb200_pool())
    assert not res.backend_runnable and res.reason == "KVCacheCapacityFailed"
    assert "spec.engine.maxModelLen 2000000 exceeds the checkpoint's 1048576 positions" in (
        res.message
    )
    assert "\n" not in res.message


def test_v41_attention_needs_a_known_release_and_an_sm90_or_sm100_gpu() -> None:
    from deepseek_operator.catalog import kv_layout_v41 as V

    assert V.attention("0.29.0", 10, 4, True, "auto") == "vLLM 0.29.0 has no known V4.1 KV layout"
    assert "compute capability 12" in str(V.attention("0.33.0", 12, 4, True, "auto"))
    assert "no packed V4.1 record" in str(V.attention("0.33.0", 10, 4, True, "fp8_e4m3"))
    # An explicit fp8_ds_mla keeps mega attention but its 528 B compressed record.
    att = V.attention("0.33.0", 10, 4, True, "fp8_ds_mla")
    assert not isinstance(att, str)
    assert (att.name, att.compressed_bytes, att.stride_alignment) == (
        "DeepseekV4MegaAttnAttention",
        528,
        528,
    )


def test_gpu_types_carry_the_nodes_compute_capability() -> None:
    from deepseek_operator.nodes.facts import node_facts
    from tests.unit.factories import node

    (gpu,) = C.gpu_types([node_facts(node("n1", "NVIDIA-H200"))])
    assert gpu.cc == (9, 0) and gpu.cc_major == 9


@pytest.mark.parametrize(
    ("release", "expected"),
    # vLLM's planner with --attention-backend FLASHMLA_SPARSE_DSV41 on SM100 at TP4 (the oracle).
    [("0.33.0", (212_256, 10_261, 303_522)), ("0.32.0", (211_968, 10_261, 303_935))],
)
def test_an_explicit_attention_backend_in_extra_args_picks_its_class(
    release: str, expected: tuple[int, int, int]
) -> None:
    from deepseek_operator.catalog.geometry import find_geometry

    geometry = find_geometry("deepseek-ai/DeepSeek-V4.1-Flash")
    assert geometry is not None
    s = spec(engine={"extraArgs": ["--attention-backend", "FLASHMLA_SPARSE_DSV41"]})
    layout = K.kv_layout(geometry, s, release, 10)
    assert not isinstance(layout, str), layout
    assert layout[0] == "DeepseekV4FlashMLAAttention, fp8_ds_mla"
    assert K.kv_blocks(layout[1], 60 * GIB, 1_048_576, 2 * 8192, 1, 1) == expected


def test_attention_backends_the_model_cannot_follow_say_why() -> None:
    from deepseek_operator.catalog.geometry import find_geometry

    geometry = find_geometry("deepseek-ai/DeepSeek-V4.1-Flash")
    assert geometry is not None
    refused = spec(engine={"extraArgs": ["--attention-backend=FLASHINFER_MLA_SPARSE"]})
    assert "not a V4.1 attention backend" in str(K.kv_layout(geometry, refused, "0.33.0", 10))
    config = spec(engine={"extraArgs": ["--attention-config", '{"backend": "FLASHMLA_SPARSE"}']})
    assert "--attention-config in extraArgs is not modelled" in str(
        K.kv_layout(geometry, config, "0.33.0", 10)
    )


# V4-Pro: 61 layers with compress ratios [128, 128, 4] + [128, 4] x 29 (its config.json).
V4_PRO = "deepseek-ai/DeepSeek-V4-Pro"


def test_v4_pro_groups_follow_its_compress_ratios() -> None:
    from deepseek_operator.catalog.geometry import find_geometry
    from deepseek_operator.catalog.kv_layout import V4_PRO_RATIOS

    assert len(V4_PRO_RATIOS) == 61
    assert (V4_PRO_RATIOS.count(4), V4_PRO_RATIOS.count(128)) == (30, 31)
    geometry = find_geometry(V4_PRO)
    assert geometry is not None and geometry.kv_groups is not None
    groups = geometry.kv_groups["packed"]
    # Two SWA groups (31 + 30 of its 61 layers; 31 + 31 with the MTP draft layer), the
    # compressed KV with the indexer caches, then the ratio-128 states before the ratio-4 ones
    # (the planner keeps the order in which the layers first appear: layer 0 is ratio 128).
    assert [g.layers[0][1] for g in groups[:2]] == [31, 30]
    assert [g.layers[0][1] for g in geometry.kv_groups["packed+mtp"][:2]] == [31, 31]
    assert [s.window for s, _ in groups[3].layers] == [128]
    assert [s.window for s, _ in groups[4].layers] == [8, 8]
    assert find_geometry("deepseek-ai/DeepSeek-V4-Pro-Base") is geometry


@pytest.mark.parametrize(
    ("length", "expected"),
    [
        # vLLM 0.33.0's planner on V4-Pro's cache layers (conformance/capacity_oracle.py with
        # V4-Pro's compress ratios): 60 GiB of KV room, 8K batched tokens, fp8_ds_mla.
        (1_048_576, (1_435_968, 10_778, 44_864, 4.162553349415476)),
        (800_000, (1_435_968, 9_807, 44_864, 4.574691546854288)),
    ],
)
def test_v4_pro_block_pool_equals_vllms_planner(
    length: int, expected: tuple[int, int, int, float]
) -> None:
    from deepseek_operator.catalog.geometry import find_geometry

    geometry = find_geometry(V4_PRO)
    assert geometry is not None and geometry.kv_groups is not None
    block, per_request, blocks = K.kv_blocks(
        geometry.kv_groups["packed"], 60 * GIB, length, 2 * 8192, 1, 1
    )
    assert (block, per_request, blocks, K.pool_concurrency(blocks, per_request)) == expected


def test_v4_pro_weights_per_gpu_on_dp8() -> None:
    # 865 GB stored: over EP8 the FP4 routed experts are 95.7 GiB per GPU; attention and the
    # embedding are whole on every DP rank (TP 1).
    cap = _cap(
        "0.33.0",
        False,
        H200,
        model={"name": V4_PRO},
        parallelism={"tensorParallelSize": 1, "dataParallelSize": 8, "expertParallel": True},
    )
    assert round(cap.weights.routed / GIB, 1) == 95.7
    assert 23 < cap.weights.dense / GIB < 24
    assert 122 < cap.weights.total / GIB < 124


def test_v4_pro_base_stores_fp8_experts() -> None:
    base = _cap(
        "0.33.0",
        False,
        GB200,
        model={"name": "deepseek-ai/DeepSeek-V4-Pro-Base"},
        parallelism={"tensorParallelSize": 1, "dataParallelSize": 16, "expertParallel": True},
    )
    pro = _cap(
        "0.33.0",
        False,
        GB200,
        model={"name": V4_PRO},
        parallelism={"tensorParallelSize": 1, "dataParallelSize": 16, "expertParallel": True},
    )
    assert 1.8 < base.weights.routed / pro.weights.routed < 1.9  # 1 B + scales vs 0.53 B


def test_no_async_scheduling_keeps_one_batch_in_flight() -> None:
    # vLLM 0.33.0 config/vllm.py max_concurrent_batches: 2 with async scheduling (PP 1), else 1.
    assert K.max_concurrent_batches(spec()) == 2
    assert K.max_concurrent_batches(spec(engine={"extraArgs": ["--no-async-scheduling"]})) == 1
    again = spec(engine={"extraArgs": ["--no-async-scheduling", "--async-scheduling"]})
    assert K.max_concurrent_batches(again) == 2
