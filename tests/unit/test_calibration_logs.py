"""Calibration on published vLLM startup logs of DeepSeek V4 (tests/fixtures/vllm_logs/): for
each logged command line, GPU and release, the capacity model's prediction against the KV
memory and concurrency vLLM logged. docs/capacity.md tabulates how far each case lands.

The logs come from releases older than the supported ones (0.22.0-0.26.0 against 0.30.0-0.33.0),
whose code is not installed here. The difference that matters is explained with the newer
release's own code: vLLM 0.33.0 reserves, per request and per sliding-window cache,
``min(W - 1 + max_in_flight_tokens, maxModelLen)`` tokens, where ``max_in_flight_tokens`` is
``max_concurrent_batches x max_num_batched_tokens`` (config/vllm.py: two batches with async
scheduling). The logs of 0.25.0 and older fit one batch (`reservation_batches` 1, which 0.33.0's
code computes for ``--no-async-scheduling``), the logs of 0.26.0 two; V4-Flash's compressor
states reserve the most, so this decides the concurrency (10,778 against 7,450 blocks per 1M
request at 8K batched tokens). The groups, pages and block arithmetic are 0.33.0's, proven
against its planner (conformance/capacity_check.py).

Before the KV cache the model reserves what vLLM builds on every rank: the weights as its
constructors shard or replicate them (V4-Flash's ``disable_tp`` / ``ReplicatedLinear`` layers,
1.20 GiB, whole on every TP rank) and the fp32 rotary caches (0.5 GiB; catalog/capacity.py
``v4_flash_dense`` and ``rope_cache_bytes``). Where a case still lands outside 10 % its test pins
the explained part (what those reservations add at its layout) and the unexplained remainder.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
import yaml

from deepseek_operator.api.load import parse_spec
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.catalog.capacity import GIB, MIB, find_geometry
from deepseek_operator.engine import capacity as C
from deepseek_operator.engine import kv_cache as K
from deepseek_operator.engine.model_facts import model_facts

ROOT = pathlib.Path(__file__).resolve().parents[2]
CASES: list[dict[str, Any]] = yaml.safe_load(
    (ROOT / "tests/fixtures/vllm_logs/deepseek_v4_startup.yaml").read_text()
)
BY_ID = {c["id"]: c for c in CASES}
TOLERANCE = 0.10


def reservation_batches(release: str) -> int | None:
    """Batches of ``max_num_batched_tokens`` a sliding-window cache reserves per request in the
    release that wrote the log: one up to 0.25.0, ``max_concurrent_batches`` (two with async
    scheduling) from 0.26.0, as 0.33.0 does; None for a build of main (no release number)."""
    parts = release.split()[0].split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    return 1 if (int(parts[0]), int(parts[1])) <= (0, 25) else 2


# The flags of a logged command line that decide capacity, and the spec fields they set.
_VALUE_FLAGS = {
    "--tensor-parallel-size": ("parallelism", "tensorParallelSize", int),
    "--data-parallel-size": ("parallelism", "dataParallelSize", int),
    "--max-model-len": ("engine", "maxModelLen", int),
    "--max-num-batched-tokens": ("engine", "maxNumBatchedTokens", int),
    "--max-num-seqs": ("engine", "maxNumSeqs", int),
    "--gpu-memory-utilization": ("engine", "gpuMemoryUtilization", float),
    "--kv-cache-dtype": ("engine", "kvCacheDtype", str),
    "--speculative-config": ("engine", "speculativeConfig", json.loads),
}


def spec_of(case: dict[str, Any]) -> DeepSeekServingSpec:
    """The DeepSeekServing that renders the logged command line (its capacity flags), with the
    logging release's sliding-window reservation (one batch: ``--no-async-scheduling``)."""
    raw: dict[str, Any] = {
        "model": {"name": case["model"]},
        "image": "vllm/vllm-openai:v0.33.0",
        "moeBackend": "auto",
        "parallelism": {},
        "engine": {"extraArgs": []},
    }
    argv = list(case["argv"])
    while argv:
        flag = argv.pop(0)
        if flag == "--enable-expert-parallel":
            raw["parallelism"]["expertParallel"] = True
        elif flag == "--moe-backend":
            raw["moeBackend"] = argv.pop(0)
        elif flag in _VALUE_FLAGS:
            section, field, kind = _VALUE_FLAGS[flag]
            raw[section][field] = kind(argv.pop(0))
        else:
            raise AssertionError(f"{case['id']}: flag {flag} is not mapped")
    if reservation_batches(case["release"]) == 1:
        raw["engine"]["extraArgs"].append("--no-async-scheduling")
    return parse_spec(raw)


def predict(case: dict[str, Any], kv_bytes: int | None = None) -> C.Capacity:
    """The capacity model's figures for the case (``kv_bytes``: at the logged KV memory)."""
    s = spec_of(case)
    if kv_bytes is not None:
        s = s.model_copy(
            update={"engine": s.engine.model_copy(update={"kv_cache_memory_bytes": kv_bytes})}
        )
    gpu = C.GpuType(
        case["gpu"]["product"], case["gpu"]["memory_mib"] * MIB, "log", tuple(case["gpu"]["cc"])
    )
    mega = s.moe_backend == "deep_gemm_mega_moe"
    cap = C.capacity(s, model_facts(s.model), "0.33.0", mega, gpu)
    assert isinstance(cap, C.Capacity), cap
    return cap


def off(predicted: float, logged: float) -> float:
    """Relative distance of the prediction from the logged figure."""
    return abs(predicted - logged) / logged


def test_every_case_cites_its_log_and_names_command_gpu_and_release() -> None:
    assert len(CASES) >= 5
    for case in CASES:
        assert case["url"].startswith("https://github.com/"), case["id"]
        assert case["release"] and case["argv"] and case["gpu"]["product"], case["id"]
        assert find_geometry(case["model"]) is not None, case["id"]
        spec_of(case)  # every flag is mapped


@pytest.mark.parametrize("ident", ["b200-tp8-flash-1m", "b200-dp8-flash-1m"])
def test_b200_concurrency_from_the_predicted_kv_room(ident: str) -> None:
    # Weights, MegaMoE buffer and allowances predicted, then 0.33.0's blocks with the release's
    # one-batch reservation: within 10 % of the concurrency the log printed (+1.0 % / +1.4 %).
    case = BY_ID[ident]
    cap = predict(case)
    assert cap.blocks_per_request == 7450  # one batch reserved; 10,778 with two (0.33.0)
    assert off(cap.requests_per_rank, case["logged"]["concurrency"]) < TOLERANCE
    # And the KV memory the log implies (concurrency x the bytes per request).
    implied = case["logged"]["concurrency"] * cap.per_request_bytes
    assert off(cap.kv_bytes, implied) < TOLERANCE


def test_b200_dp8_holds_what_the_log_says_against_tp8() -> None:
    tp8, dp8 = predict(BY_ID["b200-tp8-flash-1m"]), predict(BY_ID["b200-dp8-flash-1m"])
    logged = 8 * BY_ID["b200-dp8-flash-1m"]["logged"]["concurrency"] / 20.43
    assert off(dp8.concurrent_requests / tp8.concurrent_requests, logged) < TOLERANCE


def test_gh200_refusal_and_the_kv_one_request_needs() -> None:
    # vLLM refused: one 30K request needs 6.66 GiB, 5.44 GiB available. At the logged KV memory
    # the model refuses too, and needs 6.35 GiB (4.7 % under the log).
    case = BY_ID["gh200-tp2-flash-30k"]
    cap = predict(case, int(case["logged"]["available_kv_gib"] * GIB))
    assert cap.requests_per_rank == 0
    assert off(cap.per_request_bytes / GIB, case["logged"]["one_request_gib"]) < TOLERANCE


def test_h20_concurrency_at_the_logged_kv_memory() -> None:
    # 0.26.0 reserves two batches: 7,156 blocks per 121,344-token request in 7.7 GiB give 1.15
    # requests against the logged 150K / 121,344 = 1.24 (7 % under).
    case = BY_ID["h20-tp2-flash-121k"]
    cap = predict(case, int(case["logged"]["available_kv_gib"] * GIB))
    logged = case["logged"]["tokens"] / case["logged"]["max_model_len"]
    assert off(cap.requests_per_rank, logged) < TOLERANCE


def test_gb10_profiler_reservation_matches_the_allowance() -> None:
    # The release began reserving CUDA-graph and activation memory before sizing the KV cache:
    # 0.876 instead of 0.85 of the GPU's memory restores the former room, 3.11 GiB; the model's
    # allowance for that reservation at the default 8K batched tokens is 3.00 GiB (3.6 % under).
    case = BY_ID["gb10-tp2-flash-256k-profiler"]
    cap = predict(case)
    memory = case["gpu"]["memory_mib"] * MIB
    reserved = (case["logged"]["utilisation_restoring_the_former_room"] - 0.85) * memory
    assert off(cap.allowance, reserved) < TOLERANCE


# The unexplained remainder of each TP2 gap: predicted KV room less the logged one, GiB. The
# test also pins what the replicated dense layers (1.20 GiB, half of which sharding would have
# saved at TP2) and the 0.5 GiB of rotary caches reserve per GPU: 1.10 GiB.
@pytest.mark.parametrize(
    ("ident", "unexplained"), [("gh200-tp2-flash-30k", 7.62), ("h20-tp2-flash-121k", 1.58)]
)
def test_kv_room_for_tp2_on_96_gb_hopper_is_the_known_gap(ident: str, unexplained: float) -> None:
    # NOT within 10 %: predicted KV room 13.06 / 9.28 GiB against 5.44 / 7.7 GiB logged (+140 %
    # / +20.5 %; +158 % / +33 % before the replicated layers and rotary caches were modelled:
    # they reserve 1.10 GiB more per GPU, the recount of the sharded part 0.14 GiB less). What vLLM reserved there besides (CUDA graphs: the
    # offline GH200 run captures up to 512 tokens under FULL_AND_PIECEWISE, the H20 one up to 64
    # with 32 sequences; the all-reduce workspace; non-torch memory) is not in the logs'
    # published lines. This pins the gap (docs/capacity.md): a change of the model that moves
    # it fails here and updates the table.
    case = BY_ID[ident]
    cap = predict(case)
    tp = spec_of(case).parallelism.tensor_parallel_size
    assert tp == 2
    explained = cap.weights.rope_cache + cap.weights.replicated * (1 - 1 / tp)
    assert abs(explained / GIB - 1.10) < 0.01, explained / GIB
    logged = case["logged"]["available_kv_gib"]
    assert off(cap.kv_bytes / GIB, logged) > TOLERANCE
    assert abs((cap.kv_bytes / GIB - logged) - unexplained) < 0.05, cap.kv_bytes / GIB - logged


def test_gb10_mtp_run_is_predicted_with_its_draft() -> None:
    # The GB10 log ran MTP with 2 draft tokens: the draft layer's experts load (1.59 GiB at TP2)
    # and its sliding-window cache joins the groups, so the same GPUs hold fewer requests than
    # without the draft.
    case = BY_ID["gb10-tp2-flash-256k-profiler"]
    with_mtp = predict(case)
    argv = case["argv"][: case["argv"].index("--speculative-config")]
    without = predict({**case, "argv": argv})
    assert abs(with_mtp.weights.draft / GIB - 1.59) < 0.01, with_mtp.weights.draft / GIB
    assert without.weights.draft == 0
    assert with_mtp.requests_per_rank < without.requests_per_rank


def test_release_reservations() -> None:
    releases = ("0.22.0", "0.25.0", "0.26.0", "0.33.0", "main b5c0d43b")
    assert [reservation_batches(r) for r in releases] == [1, 1, 2, 2, None]
    assert K.max_concurrent_batches(spec_of(BY_ID["b200-tp8-flash-1m"])) == 1
    assert K.max_concurrent_batches(spec_of(BY_ID["h20-tp2-flash-121k"])) == 2
