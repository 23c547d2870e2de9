"""The capacity model: calibration on the MegaMoE PR's figures, and the decisions built on it."""

from __future__ import annotations

import pytest

from deepseek_operator.catalog.capacity import GIB, MIB
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
    from deepseek_operator.catalog.capacity import find_geometry

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
    from deepseek_operator.catalog.capacity import find_geometry

    geometry = find_geometry(V4_FLASH)
    assert geometry is not None and geometry.kv_groups is not None
    swa = [g.layers[0][1] for g in geometry.kv_groups["packed+mtp"][:2]]
    assert swa == [22, 22]


def test_the_pool_keeps_a_null_block_so_one_request_needs_one_block_more() -> None:
    # vLLM refuses to start below blocks_per_request + 1 blocks (_check_enough_kv_cache_memory).
    assert K.pool_concurrency(10_778, 10_778) == 0.0
    assert K.pool_concurrency(10_779, 10_778) == 10_779 / 10_778


def test_v4_capacity_uses_the_block_pool_and_v41_the_per_token_estimate() -> None:
    v4 = _cap("0.33.0", False, H200, model={"name": V4_FLASH})
    assert v4.num_blocks is not None and v4.blocks_per_request is not None
    assert v4.requests_per_rank == v4.num_blocks / v4.blocks_per_request
    v41 = _cap("0.33.0", False, H200)
    assert v41.num_blocks is None and v41.requests_per_rank == v41.kv_bytes / v41.per_request_bytes


def test_fixed_kv_budget_replaces_the_utilisation_figure() -> None:
    cap = _cap("0.33.0", False, engine={"kvCacheMemoryBytes": 10 * GIB})
    assert cap.kv_bytes == 10 * GIB and cap.fixed_kv_budget


def test_unknown_kv_dtype_and_checkpoint_are_named_not_guessed() -> None:
    s = spec(engine={"kvCacheDtype": "int3"})
    got = C.capacity(s, model_facts(s.model), "0.33.0", False, GB200)
    assert isinstance(got, C.Unknown) and "spec.engine.kvCacheDtype 'int3'" in got.reason
    s = spec(model={"name": "deepseek-ai/DeepSeek-V4-Pro"})
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
