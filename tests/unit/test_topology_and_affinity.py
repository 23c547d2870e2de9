"""Node labels → facts, and node affinity that admits exactly the nodes the engine admits."""

from __future__ import annotations

import itertools
import pathlib

import pytest
import yaml

from deepseek_operator.engine.placement import NodeRequirement, Requirement
from deepseek_operator.nodes.facts import build_inventory, node_facts
from deepseek_operator.nodes.precedence import SOURCE_AGENT, SOURCE_GFD, SOURCE_PRODUCT
from deepseek_operator.render.affinity import affinity_terms, node_matches
from tests.unit.factories import agent_labels, node

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_gfd_labels_of_a_gb200_tray_parse_to_sm100_with_inferred_nvlink() -> None:
    facts = node_facts(node("gb0"))
    assert facts.is_sm100 and facts.cc == (10, 0) and facts.cc_source == SOURCE_GFD
    assert facts.nvlink_fully_connected is True and facts.nvlink_source == SOURCE_PRODUCT
    assert facts.gpus("nvidia.com/gpu") == 4


def test_agent_labels_win_over_gfd() -> None:
    facts = node_facts(node("gb0", agent=agent_labels(fully_connected="false")))
    assert facts.cc_source == SOURCE_AGENT
    assert facts.nvlink_fully_connected is False and facts.nvlink_source == SOURCE_AGENT
    assert facts.nvlink_domain_size == 3


def test_product_only_labels_from_old_gfd_still_give_the_compute_capability() -> None:
    facts = node_facts(node("b0", "NVIDIA-B200", gfd_cc=False))
    assert facts.is_sm100 and facts.cc_source == SOURCE_PRODUCT


def test_blackwell_family_label_is_never_used_for_sm100() -> None:
    facts = node_facts(
        node(
            "rtx",
            "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
            labels={"nvidia.com/gpu.family": "blackwell"},
        )
    )
    assert not facts.is_sm100 and facts.cc == (12, 0)


def test_the_example_node_snapshots_parse() -> None:
    for name, expected_sm100 in (
        ("nodes-gb200.yaml", 4),
        ("nodes-h200.yaml", 0),
        ("nodes-mixed.yaml", 2),
    ):
        doc = yaml.safe_load((ROOT / "examples" / name).read_text())
        inv = build_inventory(doc["items"])
        assert sum(n.is_sm100 for n in inv.nodes) == expected_sm100
        assert all(n.taints for n in inv.nodes)  # GPU nodes carry the nvidia.com/gpu taint


def test_milli_quantities_and_not_ready_nodes() -> None:
    raw = node("x", allocatable=4, ready=False)
    raw["status"]["allocatable"]["nvidia.com/gpu"] = "4000m"
    facts = node_facts(raw)
    assert facts.gpus("nvidia.com/gpu") == 4 and not facts.ready


# Every combination of the labels the decision reads, to prove affinity == engine.
AGENT_FAMILY = [None, "sm100", "sm90", "sm120"]
# Garbled values too: "010" is 10 to int() but to no `In` selector; "ten" is nothing.
GFD_MAJOR = [None, "10", "9", "12", "010", "ten", " 10"]
PRODUCT = [
    None,
    "NVIDIA-GB200",
    "NVIDIA-B300-SXM6-AC",
    "NVIDIA-H200",
    "NVIDIA-H100-PCIe",
    "NVIDIA-GB200-SHARED",
]
NVLINK = [None, "true", "false", "unknown"]
AGENT_MEMORY = [None, "189471", "143771", "garbage"]
GFD_MEMORY = [None, "150000", "81559"]


def _label_sets() -> list[dict[str, str]]:
    out = []
    for family, major, product, nvlink in itertools.product(
        AGENT_FAMILY, GFD_MAJOR, PRODUCT, NVLINK
    ):
        labels: dict[str, str] = {}
        if family:
            labels["gpu.deepseek-operator.io/sm-family"] = family
        if major:
            labels["nvidia.com/gpu.compute.major"] = major
        if product:
            labels["nvidia.com/gpu.product"] = product
        if nvlink:
            labels["gpu.deepseek-operator.io/nvlink.fully-connected"] = nvlink
        out.append(labels)
    return out


@pytest.mark.parametrize(
    "requirement",
    [
        *(
            NodeRequirement(kind, min_gpu_memory_mib=memory)
            for kind in (
                Requirement.MEGA_MOE,
                Requirement.SM100,
                Requirement.CC_AT_LEAST_10,
                Requirement.ANY_GPU,
            )
            for memory in (0, 145529)
        ),
        NodeRequirement(Requirement.NONE, "X"),
    ],
    ids=lambda r: (
        f"affinity for {r.kind.value} (min {r.min_gpu_memory_mib} MiB) admits exactly the engine's nodes"
    ),
)
def test_affinity_admits_exactly_the_nodes_the_engine_admits(requirement: NodeRequirement) -> None:
    terms = affinity_terms(requirement)
    admitted = 0
    for labels in _label_sets():
        facts = node_facts({"metadata": {"name": "n", "labels": labels}, "status": {}})
        engine = requirement.admits(facts)
        assert node_matches(labels, terms) == engine, labels
        admitted += engine
    if requirement.kind is Requirement.NONE:
        assert admitted == 0
    else:
        assert admitted > 0


@pytest.mark.parametrize(
    ("labels", "quoted"),
    [
        ({"nvidia.com/gpu.compute.major": "010"}, "nvidia.com/gpu.compute.major='010'"),
        ({"nvidia.com/gpu.compute.major": "ten"}, "nvidia.com/gpu.compute.major='ten'"),
        ({"nvidia.com/gpu.memory": "1e99"}, "nvidia.com/gpu.memory='1e99'"),
    ],
    ids=lambda v: str(v),
)
def test_a_garbled_label_is_quoted_raw_and_never_read_as_a_fact(
    labels: dict[str, str], quoted: str
) -> None:
    raw = node("g0", labels=labels)
    facts = node_facts(raw)
    assert any(quoted in p for p in facts.label_problems), facts.label_problems
    if "compute.major" in quoted:
        # Not SM100 to the engine, as to the scheduler; and no CC read from the product instead.
        assert not facts.is_sm100 and facts.cc is None


def test_memory_labels_are_compared_as_the_scheduler_parses_them() -> None:
    terms = affinity_terms(NodeRequirement(Requirement.ANY_GPU, min_gpu_memory_mib=1000))
    for value, fits in (
        ("2000", True),
        ("02000", True),
        ("+2000", True),
        (" 2000", False),
        ("2_000", False),
        ("1e99", False),
    ):
        labels = {"nvidia.com/gpu.memory": value}
        facts = node_facts({"metadata": {"name": "n", "labels": labels}, "status": {}})
        assert node_matches(labels, terms) is fits, value
        assert (
            NodeRequirement(Requirement.ANY_GPU, min_gpu_memory_mib=1000).admits(facts) is fits
        ), value
