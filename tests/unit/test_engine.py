"""The decision table of docs/decision-rules.md, rule by rule, with sentence ids."""

from __future__ import annotations

import re
from typing import Any

import pytest

from deepseek_operator.api.backends import MOE_BACKENDS
from deepseek_operator.engine.checks import CheckCategory
from deepseek_operator.engine.decision import resolve
from deepseek_operator.engine.layout import sequence_parallel
from deepseek_operator.engine.release import image_tag_release
from deepseek_operator.engine.stability import PreviousDecision
from tests.racks import RACK_A, RACK_B, make_gb200_tray
from tests.unit.factories import agent_labels, gb200_pool, inventory, node, spec

# --- auto becomes deep_gemm_mega_moe only when every rule holds --------------------------------


def test_auto_selects_mega_moe_for_the_seed_spec_on_a_gb200_pool() -> None:
    res = resolve(spec(), gb200_pool())
    assert res.moe_backend == "deep_gemm_mega_moe"
    assert res.reason == "MegaMoESelected"
    assert res.sequence_parallel is True
    assert res.expert_parallel_size == 4
    assert res.gpus_per_pod == 4
    assert all(c.passed for c in res.checks)
    assert [c.name for c in res.checks][:2] == ["VLLMRelease", "KnownMoEBackend"]
    assert [c.rule for c in res.checks][2:15] == [f"R{i}" for i in range(2, 15)]
    assert len(res.eligible_nodes) == 4


FLIPS: list[Any] = [
    pytest.param(
        {"model": {"name": "deepseek-ai/DeepSeek-V4-Flash"}},
        gb200_pool(),
        "ModelArchitecture",
        id="R2 V4 (not V4.1) keeps auto",
    ),
    pytest.param(
        {"model": {"name": "my/local-ckpt"}},
        gb200_pool(),
        "ModelArchitecture",
        id="R2 unknown checkpoint without facts keeps auto",
    ),
    pytest.param(
        {},
        inventory(node("h0", "NVIDIA-H200"), node("h1", "NVIDIA-H200")),
        "GPUArchitecture",
        id="R3 Hopper-only pool keeps auto",
    ),
    pytest.param(
        {},
        inventory(node("rtx", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition")),
        "GPUArchitecture",
        id="R3 SM120 Blackwell is not SM100",
    ),
    pytest.param(
        {"env": [{"name": "VLLM_USE_DEEP_GEMM", "value": "0"}]},
        gb200_pool(),
        "DeepGEMM",
        id="R4 VLLM_USE_DEEP_GEMM=0 keeps auto",
    ),
    pytest.param(
        {
            "env": [
                {
                    "name": "VLLM_USE_DEEP_GEMM",
                    "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}},
                }
            ]
        },
        gb200_pool(),
        "DeepGEMM",
        id="R4 DeepGEMM from valueFrom cannot be verified",
    ),
    pytest.param(
        {"model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash", "expertDtype": "fp8"}},
        gb200_pool(),
        "ExpertDtype",
        id="R5 fp8 experts keep auto",
    ),
    pytest.param(
        {"model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash", "scoringFunc": "softmax"}},
        gb200_pool(),
        "Routing",
        id="R6 softmax routing keeps auto",
    ),
    pytest.param(
        {"model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash", "hiddenSize": 5000}},
        gb200_pool(),
        "Dimensions",
        id="R7 hidden size not a multiple of 128",
    ),
    pytest.param(
        {"model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash", "moeIntermediateSize": 2300}},
        gb200_pool(),
        "Dimensions",
        id="R7 intermediate size not a multiple of 128",
    ),
    pytest.param(
        {"model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash", "numRoutedExperts": 382}},
        gb200_pool(),
        "Dimensions",
        id="R7 experts not divisible by EP size",
    ),
    pytest.param(
        {"parallelism": {"tensorParallelSize": 4, "expertParallel": False}},
        gb200_pool(),
        "ExpertParallel",
        id="R8 expert parallel off keeps auto",
    ),
    pytest.param(
        {
            "parallelism": {
                "tensorParallelSize": 2,
                "pipelineParallelSize": 2,
                "expertParallel": True,
            }
        },
        gb200_pool(),
        "NoPipelineOrContextParallel",
        id="R9 pipeline parallel keeps auto",
    ),
    pytest.param(
        {
            "parallelism": {
                "tensorParallelSize": 4,
                "decodeContextParallelSize": 2,
                "expertParallel": True,
            }
        },
        gb200_pool(),
        "NoPipelineOrContextParallel",
        id="R9 decode context parallel keeps auto",
    ),
    pytest.param(
        {
            "parallelism": {
                "tensorParallelSize": 2,
                "prefillContextParallelSize": 2,
                "expertParallel": True,
            }
        },
        gb200_pool(),
        "NoPipelineOrContextParallel",
        id="R9 prefill context parallel keeps auto",
    ),
    pytest.param(
        {
            "parallelism": {
                "tensorParallelSize": 4,
                "dataParallelSize": 2,
                "dataParallelSizeLocal": 1,
                "expertParallel": True,
            }
        },
        gb200_pool(),
        "LocalDataParallel",
        id="R10 remote DP keeps auto",
    ),
    pytest.param(
        {
            "parallelism": {
                "tensorParallelSize": 4,
                "expertParallel": True,
                "distributedExecutorBackend": "ray",
            }
        },
        gb200_pool(),
        "NotRay",
        id="R11 Ray keeps auto",
    ),
    pytest.param(
        {"engine": {"speculativeConfig": {"method": "dspark", "num_speculative_tokens": 5}}},
        gb200_pool(),
        "NoSpeculativeDecoding",
        id="R12 DSpark speculative decoding keeps auto",
    ),
    pytest.param(
        {"engine": {"enableDbo": True}}, gb200_pool(), "NoMicrobatching", id="R13 DBO keeps auto"
    ),
    pytest.param(
        {"engine": {"ubatchSize": 2}},
        gb200_pool(),
        "NoMicrobatching",
        id="R13 ubatch size 2 keeps auto",
    ),
    pytest.param(
        {},
        inventory(node("gb0", agent=agent_labels(fully_connected="false"))),
        "NVLinkFullyConnected",
        id="R14 broken NVLink mesh keeps auto",
    ),
    pytest.param(
        {},
        inventory(node("gb0", agent=agent_labels(fully_connected="unknown"))),
        "NVLinkFullyConnected",
        id="R14 unknown NVLink keeps auto",
    ),
    pytest.param(
        {"parallelism": {"tensorParallelSize": 8, "expertParallel": True}},
        gb200_pool(),
        "NVLinkFullyConnected",
        id="R14 EP group of 8 does not fit a 4-GPU tray",
    ),
    pytest.param(
        {"replicas": 3},
        gb200_pool(2),
        "MegaMoECapacity",
        id="capacity SM100 nodes cannot hold all replicas",
    ),
]


@pytest.mark.parametrize(("overrides", "nodes", "failed"), FLIPS)
def test_each_rule_flips_auto_back(overrides: dict[str, Any], nodes: Any, failed: str) -> None:
    res = resolve(spec(**overrides), nodes)
    assert res.moe_backend == "auto"
    assert res.reason == f"{failed}Failed"
    assert res.condition_reason == "KeptAuto"
    assert res.backend_runnable is True
    assert res.failed_checks[0].name == failed
    assert failed in res.message


def test_r8_ep_size_1_keeps_auto_and_one_gpu_cannot_hold_the_weights() -> None:
    # EP size 1 fails R8 first; V4.1-Flash's ~280 GiB of weights on one GB200 then leave no KV
    # room on the FusedMoE path either, so the capacity model refuses it before pods start.
    res = resolve(spec(parallelism={"tensorParallelSize": 1, "expertParallel": True}), gb200_pool())
    assert res.moe_backend == "auto"
    assert res.failed_checks[0].name == "ExpertParallel"
    assert res.reason == "KVCacheCapacityFailed" and res.backend_runnable is False
    assert "FusedMoE cannot hold one request at maxModelLen 1048576" in res.message
    assert "fix: more GPUs per replica" in res.message


def test_v4_message_points_at_the_explicit_recipe_flag() -> None:
    res = resolve(spec(model={"name": "deepseek-ai/DeepSeek-V4-Flash"}), gb200_pool())
    assert "deep_gemm_mega_moe" in res.failed_checks[0].message
    assert "V4.1" in res.failed_checks[0].message


def test_user_facts_make_an_unknown_checkpoint_eligible() -> None:
    res = resolve(
        spec(
            model={
                "name": "/models/dsv41-local",
                "architecture": "DeepseekV41ForCausalLM",
                "expertDtype": "fp4",
                "scoringFunc": "sqrtsoftplus",
                "normTopkProb": True,
                "hiddenSize": 5120,
                "moeIntermediateSize": 2304,
                "numRoutedExperts": 384,
            }
        ),
        gb200_pool(),
    )
    assert res.moe_backend == "deep_gemm_mega_moe"
    assert "spec.model" in next(c for c in res.checks if c.name == "ModelArchitecture").message


def test_b300_cc_10_3_is_in_the_sm100_family() -> None:
    res = resolve(
        spec(),
        inventory(node("b300", "NVIDIA-B300-SXM6-AC", agent=agent_labels("NVIDIA-B300-SXM6-AC"))),
    )
    assert res.moe_backend == "deep_gemm_mega_moe"


def test_nvlink_inferred_from_product_says_so() -> None:
    res = resolve(spec(), inventory(node("gb0")))
    assert res.moe_backend == "deep_gemm_mega_moe"
    nvlink = next(c for c in res.checks if c.name == "NVLinkFullyConnected")
    assert "inferred from product" in nvlink.message


def test_pcie_product_is_never_inferred_fully_connected() -> None:
    res = resolve(
        spec(parallelism={"tensorParallelSize": 2}), inventory(node("h", "NVIDIA-H100-PCIe"))
    )
    assert res.moe_backend == "auto"


# --- mixed pools -------------------------------------------------------------------------------


def test_mixed_pool_pins_mega_moe_to_the_healthy_gb200_nodes_only() -> None:
    inv = inventory(
        node("h200-0", "NVIDIA-H200", agent=agent_labels("NVIDIA-H200")),
        node("gb200-ok", agent=agent_labels()),
        node("gb200-broken", agent=agent_labels(fully_connected="false")),
    )
    res = resolve(spec(), inv)
    assert res.moe_backend == "deep_gemm_mega_moe"
    assert res.eligible_nodes == ("gb200-ok",)
    assert "gb200-broken" in res.placement.message
    assert "h200-0" in res.placement.message


def test_mixed_pool_keeps_auto_when_gb200_cannot_hold_every_replica() -> None:
    inv = inventory(
        node("h200-0", "NVIDIA-H200"),
        node("h200-1", "NVIDIA-H200"),
        node("gb200-0", agent=agent_labels()),
    )
    res = resolve(spec(replicas=2), inv)
    assert res.moe_backend == "auto"
    assert res.reason == "MegaMoECapacityFailed"
    assert res.placement.placeable  # auto may use the H200 nodes too
    assert set(res.eligible_nodes) == {"h200-0", "h200-1", "gb200-0"}


def test_node_selector_taints_and_cordons_shape_the_candidate_pool() -> None:
    inv = inventory(
        node(
            "gb-tainted",
            agent=agent_labels(),
            taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}],
        ),
        node("gb-cordoned", agent=agent_labels(), unschedulable=True),
        node("gb-other-pool", agent=agent_labels(), labels={"pool": "b"}),
        node("h-pool-a", "NVIDIA-H200", labels={"pool": "a"}),
    )
    res = resolve(spec(nodeSelector={"pool": "a"}), inv)
    assert res.moe_backend == "auto"
    assert res.eligible_nodes == ("h-pool-a",)
    tolerated = resolve(spec(tolerations=[{"key": "dedicated", "operator": "Exists"}]), inv)
    assert tolerated.moe_backend == "deep_gemm_mega_moe"
    assert tolerated.eligible_nodes == ("gb-other-pool", "gb-tainted")


def test_nodes_with_too_few_allocatable_gpus_are_not_eligible() -> None:
    inv = inventory(
        node("gb-busy", agent=agent_labels(), allocatable=2), node("gb-free", agent=agent_labels())
    )
    res = resolve(spec(), inv)
    assert res.eligible_nodes == ("gb-free",)
    assert "2 allocatable nvidia.com/gpu < 4" in res.placement.message


@pytest.mark.parametrize("backend", ["auto", "deep_gemm_mega_moe"])
def test_an_unreadable_memory_label_is_named_not_read_as_0_mib_or_an_nvlink_failure(
    backend: str,
) -> None:
    inv = inventory(
        *(
            node(f"gb{i}", agent=agent_labels(), labels={"nvidia.com/gpu.memory": "1e99"})
            for i in range(2)
        )
    )
    res = resolve(spec(moeBackend=backend, parallelism={"expertParallel": True}), inv)
    assert res.reason == "GPUMemoryFailed", res.message
    memory = next(c for c in res.checks if c.name == "GPUMemory")
    for message in (memory.message, res.placement.message):
        assert "gb0: GPU memory label nvidia.com/gpu.memory='1e99' is not an integer" in message
        assert "scheduler's Gt" in message and not re.search(r"(?<![0-9])0 MiB", message)
    nvlink = next(c for c in res.checks if c.name == "NVLinkFullyConnected")
    assert nvlink.passed, nvlink.message


def test_a_memory_label_below_the_minimum_is_quoted() -> None:
    inv = inventory(node("gb0", agent=agent_labels(), labels={"nvidia.com/gpu.memory": "81920"}))
    res = resolve(spec(), inv)
    assert res.reason == "GPUMemoryFailed"
    assert "gb0: GPU memory label nvidia.com/gpu.memory='81920' (GFD) is below the" in (
        res.placement.message
    )


def test_gpu_labelled_nodes_without_allocatable_gpus_are_named() -> None:
    missing = node("gb-no-plugin", agent=agent_labels())
    del missing["status"]["allocatable"]["nvidia.com/gpu"]
    zero = node("gb-zero", labels={}, allocatable=0)
    cpu_only = {"metadata": {"name": "cpu-0", "labels": {}}, "status": {"allocatable": {}}}
    res = resolve(spec(), inventory(missing, zero, cpu_only))
    assert not res.placement.placeable
    expected = (
        "gb-no-plugin: labelled gpu.deepseek-operator.io/count='4' but "
        "status.allocatable[nvidia.com/gpu] is missing",
        "gb-zero: labelled nvidia.com/gpu.count='4' but status.allocatable[nvidia.com/gpu] is 0",
    )
    architecture = next(c for c in res.checks if c.name == "GPUArchitecture")
    for message in (res.placement.message, architecture.message):
        assert all(e in message for e in expected), message
        assert "cpu-0" not in message
    # Beside a usable node too, while the replicas fit: the message still names them.
    res = resolve(spec(), inventory(missing, node("gb-ok", agent=agent_labels())))
    assert res.placement.placeable and expected[0] in res.placement.message


def test_empty_pool_is_not_placeable() -> None:
    res = resolve(spec(), inventory())
    assert res.moe_backend == "auto"
    assert not res.placement.placeable
    assert "0/0" in res.placement.message


# --- explicit backends are preserved -----------------------------------------------------------


@pytest.mark.parametrize(
    "backend",
    [b for b in MOE_BACKENDS if b != "auto"],
    ids=lambda b: f"explicit {b} is rendered verbatim",
)
def test_every_explicit_backend_is_preserved(backend: str) -> None:
    res = resolve(spec(moeBackend=backend), gb200_pool())
    assert res.moe_backend == backend


def test_explicit_spelling_is_normalised_like_vllm() -> None:
    res = resolve(spec(moeBackend="Deep-GEMM-Mega-MoE"), gb200_pool())
    assert res.moe_backend == "deep_gemm_mega_moe"
    assert res.reason == "Explicit"


def test_explicit_mega_moe_on_hopper_only_is_unrunnable_with_vllms_message() -> None:
    res = resolve(spec(moeBackend="deep_gemm_mega_moe"), inventory(node("h0", "NVIDIA-H200")))
    assert res.moe_backend == "deep_gemm_mega_moe"
    assert res.backend_runnable is False
    assert res.reason == "GPUArchitectureFailed"
    assert "DeepGEMM MegaMoE requires SM100 GPUs." in res.message
    assert res.eligible_nodes == ()


def test_explicit_mega_moe_in_a_mixed_pool_is_pinned_to_sm100_nodes() -> None:
    inv = inventory(node("h0", "NVIDIA-H200"), node("gb0", agent=agent_labels()))
    res = resolve(spec(moeBackend="deep_gemm_mega_moe"), inv)
    assert res.backend_runnable
    assert res.eligible_nodes == ("gb0",)


def test_check_categories_decide_what_an_explicit_backend_enforces() -> None:
    # NVLink fails on the broken tray, but for an explicit backend it is information only: the
    # category (not the check's name or its vLLM rule id) is what the decision filters on.
    broken = agent_labels(fully_connected="false")
    res = resolve(spec(moeBackend="deep_gemm_mega_moe"), inventory(node("gb0", agent=broken)))
    nvlink = next(c for c in res.checks if c.name == "NVLinkFullyConnected")
    assert nvlink.category is CheckCategory.INFO and nvlink.rule == "R14" and not nvlink.passed
    assert res.backend_runnable and res.reason == "Explicit"
    assert nvlink.to_status().rule == "info"
    by_name = {c.name: c.category for c in res.checks}
    assert by_name["GPUArchitecture"] is CheckCategory.NODES
    assert by_name["ExpertParallel"] is CheckCategory.SPEC
    assert by_name["GPUMemory"] is CheckCategory.FIT
    assert by_name["Capacity"] is CheckCategory.PLACEMENT


def test_explicit_mega_moe_with_fp8_experts_is_unrunnable_anywhere() -> None:
    res = resolve(
        spec(model={"name": "deepseek-ai/DeepSeek-V4-Flash-Base"}, moeBackend="deep_gemm_mega_moe"),
        gb200_pool(),
    )
    assert not res.backend_runnable
    assert res.reason == "ExpertDtypeFailed"
    assert "only supports fp4 experts" in res.message
    assert res.eligible_nodes == ()


def test_explicit_mega_moe_experts_must_divide_ep_size_including_draft_layers() -> None:
    res = resolve(
        spec(
            moeBackend="deep_gemm_mega_moe",
            parallelism={"tensorParallelSize": 4, "dataParallelSize": 3},
            engine={"speculativeConfig": {"method": "dspark"}},
        ),
        inventory(*(node(f"b{i}", "NVIDIA-B300-SXM6-AC") for i in range(2))),
    )
    assert not res.backend_runnable
    assert "draft experts 128 must be divisible by ep_size=12" in res.message


def test_flashinfer_moe_ep_deep_gemm_is_deepseek_only() -> None:
    # vLLM 0.33.0's FLASHINFER_MOE_EP_ARCHITECTURES has V4 and V4.1; other models are refused.
    other = {
        "name": "/models/other-moe",
        "architecture": "MixtralForCausalLM",
        "expertDtype": "fp4",
        "scoringFunc": "sqrtsoftplus",
        "hiddenSize": 4096,
        "moeIntermediateSize": 2048,
        "numRoutedExperts": 256,
    }
    res = resolve(spec(model=other, moeBackend="flashinfer_moe_ep_mega_deep_gemm"), gb200_pool())
    assert not res.backend_runnable
    assert res.reason == "FlashInferArchitectureFailed"
    ok = resolve(
        spec(
            model={"name": "deepseek-ai/DeepSeek-V4.1-Flash"},
            moeBackend="flashinfer_moe_ep_mega_deep_gemm",
        ),
        gb200_pool(),
    )
    assert ok.backend_runnable, ok.message
    # V4-Pro passes the architecture guard; on one 4-GPU tray its 865 GB of weights do not fit,
    # which the capacity check (not the guard) says.
    pro = resolve(
        spec(
            model={"name": "deepseek-ai/DeepSeek-V4-Pro"},
            moeBackend="flashinfer_moe_ep_mega_deep_gemm",
        ),
        gb200_pool(),
    )
    assert pro.reason == "KVCacheCapacityFailed" and "weights 198.75 GiB/GPU" in pro.message


def test_release_from_spec_image_tag_or_newest() -> None:
    assert resolve(spec(), gb200_pool()).vllm_version == "0.33.0"
    tagged = resolve(spec(image="vllm/vllm-openai:v0.31.0"), gb200_pool())
    assert tagged.vllm_version == "0.31.0"
    assert "image tag" in tagged.checks[0].message
    pinned = resolve(spec(image="vllm/vllm-openai:v0.31.0", vllmVersion="0.32.0"), gb200_pool())
    assert pinned.vllm_version == "0.32.0"
    newest = resolve(spec(), gb200_pool()).checks[0]
    assert newest.passed and "newest supported" in newest.message


def test_unsupported_release_is_not_resolved() -> None:
    res = resolve(spec(vllmVersion="0.29.0"), gb200_pool())
    assert not res.backend_runnable
    assert res.reason == "VLLMReleaseFailed"
    assert "0.29.0" in res.message and "0.33.0" in res.message
    assert res.eligible_nodes == ()


def test_backend_the_release_lacks_is_refused() -> None:
    # flashinfer_moe_ep_mega_cutedsl exists in 0.30/0.31 only; flashinfer_moe_ep_cutedsl from 0.32.
    old = resolve(
        spec(moeBackend="flashinfer_moe_ep_mega_cutedsl", vllmVersion="0.31.0"), gb200_pool()
    )
    assert old.backend_runnable, old.message
    new = resolve(spec(moeBackend="flashinfer_moe_ep_mega_cutedsl"), gb200_pool())
    assert not new.backend_runnable and new.reason == "KnownMoEBackendFailed"
    assert "vLLM 0.33.0 has no --moe-backend flashinfer_moe_ep_mega_cutedsl" in new.message


def test_explicit_backend_outside_the_mxfp4_map_is_refused_with_vllms_message() -> None:
    res = resolve(spec(moeBackend="cutlass"), gb200_pool())
    assert not res.backend_runnable
    assert "is not supported for MXFP4 MoE" in res.message
    ok = resolve(spec(moeBackend="flashinfer_trtllm"), gb200_pool())
    assert ok.backend_runnable and ok.reason == "Explicit"


# --- vLLM's sequence-parallel truth table (docs/decision-rules.md) ----------------------------------

SP_TABLE = [
    pytest.param(2, True, 4, 1, "auto", False, id="PP>1 never SP"),
    pytest.param(1, False, 4, 2, "auto", False, id="EP off never SP"),
    pytest.param(1, True, 1, 4, "deep_gemm_mega_moe", False, id="TP1 never SP"),
    pytest.param(1, True, 4, 1, "auto", False, id="TP4 DP1 auto is the gap: SP off"),
    pytest.param(1, True, 4, 1, "flashinfer_trtllm", False, id="TP4 DP1 non-mega SP off"),
    pytest.param(1, True, 4, 1, "deep_gemm_mega_moe", True, id="TP4 DP1 mega SP on"),
    pytest.param(
        1, True, 4, 1, "flashinfer_moe_ep_mega_cutedsl", True, id="TP4 DP1 FlashInfer mega SP on"
    ),
    pytest.param(1, True, 2, 2, "auto", True, id="TP2 DP2 any backend SP on"),
]


@pytest.mark.parametrize(("pp", "ep", "tp", "dp", "backend", "expected"), SP_TABLE)
def test_sequence_parallel_truth_table(
    pp: int, ep: bool, tp: int, dp: int, backend: str, expected: bool
) -> None:
    s = spec(
        parallelism={
            "tensorParallelSize": tp,
            "pipelineParallelSize": pp,
            "dataParallelSize": dp,
            "expertParallel": ep,
        }
    )
    assert sequence_parallel(s, backend) is expected


# --- stability ---------------------------------------------------------------------------------


def test_node_churn_keeps_a_running_mega_moe_decision_while_eligible_nodes_remain() -> None:
    inv = inventory(
        node("gb0", agent=agent_labels(fully_connected="false")),
        node("gb1", agent=agent_labels()),
        node("h0", "NVIDIA-H200"),
    )
    previous = PreviousDecision("deep_gemm_mega_moe", "MegaMoESelected")
    res = resolve(spec(replicas=2), inv, previous)  # fresh decision would keep auto (capacity)
    assert res.moe_backend == "deep_gemm_mega_moe"
    assert res.condition_reason == "MegaMoESelected"
    assert "kept" in res.message and "MegaMoECapacityFailed" in res.message
    assert res.eligible_nodes == ("gb1",)


def test_node_churn_changes_the_decision_when_no_eligible_node_is_left() -> None:
    inv = inventory(
        node("gb0", agent=agent_labels(fully_connected="false")), node("h0", "NVIDIA-H200")
    )
    res = resolve(spec(), inv, PreviousDecision("deep_gemm_mega_moe", "MegaMoESelected"))
    assert res.moe_backend == "auto"
    assert "no eligible node left" in res.message


def test_a_better_decision_is_reported_not_applied() -> None:
    res = resolve(spec(), gb200_pool(), PreviousDecision("auto", "GPUArchitectureFailed"))
    assert res.moe_backend == "auto"
    assert "has become possible" in res.message
    assert res.condition_reason == "KeptAuto"


@pytest.mark.parametrize(
    ("image", "release"),
    [
        ("vllm/vllm-openai:v0.33.0", "0.33.0"),
        ("registry.example.com:5000/vllm/vllm-openai:v0.32.0", "0.32.0"),
        ("vllm/vllm-openai:v0.31.0@sha256:" + "0" * 64, "0.31.0"),
        ("registry.example.com:5000/vllm/vllm-openai", None),
        ("vllm/vllm-openai:deepseekv41-flash-0909", None),
        ("vllm/vllm-openai:v0.33", None),
    ],
)
def test_image_tag_release(image: str, release: str | None) -> None:
    assert image_tag_release(image) == release


def test_megamoe_needs_normalised_top_k_from_vllm_0_31() -> None:
    off = {"name": "deepseek-ai/DeepSeek-V4.1-Flash", "normTopkProb": False}
    res = resolve(spec(model=off, moeBackend="deep_gemm_mega_moe"), gb200_pool())
    assert not res.backend_runnable and res.reason == "NormTopkProbFailed"
    assert "requires normalized top-k probabilities" in res.message
    old = resolve(
        spec(model=off, moeBackend="deep_gemm_mega_moe", vllmVersion="0.30.0"), gb200_pool()
    )
    assert old.backend_runnable, old.message
    assert resolve(spec(model=off), gb200_pool()).moe_backend == "auto"


# --- decisions over one inventory share the work over its nodes, never the answer ---------------


def _mixed_fleet() -> Any:
    taint = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    return inventory(
        *(node(f"gb-a-{i}", agent=agent_labels(), labels={"pool": "a"}) for i in range(3)),
        node("gb-a-broken", agent=agent_labels(fully_connected="false"), labels={"pool": "a"}),
        node("gb-a-tainted", agent=agent_labels(), labels={"pool": "a"}, taints=taint),
        node("gb-a-small", agent=agent_labels(), labels={"pool": "a"}, allocatable=2),
        *(node(f"h200-b-{i}", "NVIDIA-H200", labels={"pool": "b"}) for i in range(2)),
        node("b300-b", "NVIDIA-B300", labels={"pool": "b"}),
        node("gb-c-cordoned", agent=agent_labels(), labels={"pool": "c"}, unschedulable=True),
        # NVLink trays in two cliques (and one with a pending fabric) for multi-pod replicas.
        *(
            make_gb200_tray(f"{r}{i}", rack, kwok=False)
            for r, rack in (("ra", RACK_A), ("rb", RACK_B))
            for i in range(2)
        ),
        make_gb200_tray("r-pending", None, fabric="pending", kwok=False),
    )


SHARED_SPECS: list[dict[str, Any]] = [
    {},
    {"replicas": 2},
    {"replicas": 9},
    {"nodeSelector": {"pool": "a"}},
    {"nodeSelector": {"pool": "a"}, "replicas": 3},
    {"nodeSelector": {"pool": "b"}},
    {"nodeSelector": {"pool": "c"}},
    {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    {"parallelism": {"tensorParallelSize": 2, "expertParallel": True}},
    {"parallelism": {"tensorParallelSize": 8, "expertParallel": True}},
    {"model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash", "vramMinimumGb": 2000}},
    {"model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash", "vramMinimumGb": 100}},
    {"gpuResourceName": "example.com/gpu"},
    *(
        {"parallelism": dep8, "replicas": replicas, "moeBackend": backend}
        for dep8 in (
            {
                "tensorParallelSize": 1,
                "dataParallelSize": 8,
                "dataParallelSizeLocal": 4,
                "expertParallel": True,
            },
        )
        for replicas in (1, 2, 3)
        for backend in ("deep_gemm_mega_moe", "auto")
    ),
    *({"moeBackend": backend} for backend in MOE_BACKENDS),
    *({"moeBackend": backend, "nodeSelector": {"pool": "b"}} for backend in MOE_BACKENDS),
]


def test_decisions_sharing_one_inventory_equal_decisions_on_fresh_ones() -> None:
    """Objects on one inventory share candidates, placements and node checks (keyed by what
    each reads): every decision must equal the one made on an inventory of its own."""
    shared = _mixed_fleet()
    for overrides in [*SHARED_SPECS, *reversed(SHARED_SPECS)]:
        s = spec(**overrides)
        for previous in (None, PreviousDecision("deep_gemm_mega_moe", "MegaMoESelected")):
            alone = resolve(s, _mixed_fleet(), previous)
            assert resolve(s, shared, previous) == alone, overrides


def test_an_agent_family_the_affinity_cannot_match_is_quoted_as_the_deciding_label() -> None:
    labels = agent_labels("NVIDIA-GB200")
    labels["gpu.deepseek-operator.io/sm-family"] = "SM100"
    res = resolve(spec(), inventory(node("gb0", agent=labels)))
    arch = next(c for c in res.checks if c.name == "GPUArchitecture")
    assert not arch.passed
    assert "gpu.deepseek-operator.io/sm-family='SM100' (agent)" in arch.message
    assert "lower-case" in arch.message


def test_an_unknown_agent_nvlink_value_is_quoted_and_not_called_missing() -> None:
    labels = agent_labels("NVIDIA-GB200", fully_connected="maybe")
    res = resolve(spec(), inventory(node("gb0", agent=labels)))
    nvlink = next(c for c in res.checks if c.name == "NVLinkFullyConnected")
    assert not nvlink.passed
    assert "gpu.deepseek-operator.io/nvlink.fully-connected='maybe' (agent" in nvlink.message
    assert "no agent label" not in nvlink.message
    assert "not an NVSwitch" not in nvlink.message


@pytest.mark.parametrize(
    ("labels", "check", "quoted"),
    [
        ({"nvidia.com/gpu.compute.major": "9"}, "GPUArchitecture", "compute.major='9' (GFD)"),
        (
            {"gpu.deepseek-operator.io/sm-family": "sm90"},
            "GPUArchitecture",
            "sm-family='sm90' (agent)",
        ),
        (
            {"gpu.deepseek-operator.io/nvlink.fully-connected": "false"},
            "NVLinkFullyConnected",
            "nvlink.fully-connected='false' (agent)",
        ),
        (
            {"gpu.deepseek-operator.io/nvlink.fully-connected": "unknown"},
            "NVLinkFullyConnected",
            "nvlink.fully-connected='unknown' (agent)",
        ),
    ],
)
def test_every_failed_node_check_quotes_the_label_that_decided(
    labels: dict[str, str], check: str, quoted: str
) -> None:
    res = resolve(spec(), inventory(node("n0", labels=labels)))
    result = next(c for c in res.checks if c.name == check)
    assert not result.passed
    assert quoted in result.message
