"""GPU facts from ``gpu.nvidia.com`` ResourceSlices, merged with labels by the precedence table."""

from __future__ import annotations

import copy
import json
import pathlib
import re
from typing import Any

import pytest
import yaml

from deepseek_operator import names
from deepseek_operator.api.load import parse_serving
from deepseek_operator.commands.render.inputs import load_nodes_file
from deepseek_operator.nodes.dra import read_slices
from deepseek_operator.nodes.dra_device import parse_quantity_bytes
from deepseek_operator.nodes.facts import NodeInventory, build_inventory
from deepseek_operator.nodes.precedence import (
    COMPUTE,
    NVLINK,
    SOURCE_AGENT,
    SOURCE_DRA,
    SOURCE_DRA_PRODUCT,
    SOURCE_GFD,
)
from deepseek_operator.plan import Observed, plan
from tests.dra_slices import dra_only, dra_only_pool, gpu_device, gpu_slice
from tests.unit.factories import agent_labels

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOW = "2026-01-01T00:00:00Z"
MEGA = parse_serving(yaml.safe_load((ROOT / "examples/dsv41-flash-gb200.yaml").read_text()))


def bare_node(name: str, labels: dict[str, str] | None = None, gpus: int = 0) -> dict[str, Any]:
    """A Ready node with no GPU labels (what a DRA-only GPU node looks like)."""
    allocatable = {"cpu": "64", "memory": "512Gi"} | ({"nvidia.com/gpu": str(gpus)} if gpus else {})
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def one(node: dict[str, Any], *slices: Any) -> NodeInventory:
    return build_inventory([node], slices)


def test_a_dra_only_gb200_tray_reads_every_fact_from_its_slice() -> None:
    facts = one(bare_node("t0"), gpu_slice("t0")).nodes[0]
    assert facts.gpus("nvidia.com/gpu") == 4 and facts.gpus_from_dra
    assert (facts.family, facts.cc, facts.cc_source) == ("sm100", (10, 0), SOURCE_DRA)
    assert (facts.gpu_memory_mib, facts.memory_source) == (189471, SOURCE_DRA)
    assert facts.product == "NVIDIA-GB200"
    assert (facts.nvlink_fully_connected, facts.nvlink_source) == (True, SOURCE_DRA_PRODUCT)
    assert facts.evidence(COMPUTE) == (
        "gpu.nvidia.com ResourceSlice cudaComputeCapability='10.0.0' (DRA)"
    )
    assert facts.evidence(NVLINK).endswith(
        "productName='NVIDIA GB200' (inferred from DRA productName)"
    )


def test_agent_labels_win_over_dra_and_dra_over_gfd() -> None:
    gfd_h200 = {
        "nvidia.com/gpu.product": "NVIDIA-H200",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.memory": "143771",
    }
    over_gfd = one(bare_node("n", gfd_h200), gpu_slice("n")).nodes[0]
    assert (over_gfd.family, over_gfd.cc_source, over_gfd.memory_source) == (
        "sm100",
        SOURCE_DRA,
        SOURCE_DRA,
    )
    agent = {names.AGENT_PREFIX + k: v for k, v in agent_labels(product="NVIDIA-H200").items()}
    under_agent = one(bare_node("n", agent), gpu_slice("n")).nodes[0]
    assert (under_agent.family, under_agent.cc_source) == ("sm90", SOURCE_AGENT)
    without = one(bare_node("n", gfd_h200, gpus=8)).nodes[0]
    assert (without.family, without.cc_source, without.dra) == ("sm90", SOURCE_GFD, None)


def test_allocatable_gpus_win_over_slice_devices_for_the_count() -> None:
    facts = one(bare_node("n", gpus=8), gpu_slice("n", count=4)).nodes[0]
    assert facts.gpus("nvidia.com/gpu") == 8 and not facts.gpus_from_dra


def _without(attribute: str) -> dict[str, Any]:
    device = gpu_device(0)
    del device["attributes"][attribute]
    return device


def _with(attribute: str, value: Any) -> dict[str, Any]:
    device = gpu_device(0)
    device["attributes"][attribute] = value
    return device


def _capacity(value: Any) -> dict[str, Any]:
    device = gpu_device(0)
    device["capacity"] = value
    return device


MALFORMED: dict[str, tuple[list[Any], str]] = {
    "a device without cudaComputeCapability is not counted": (
        [_without("cudaComputeCapability")],
        "attribute cudaComputeCapability is missing",
    ),
    "a compute capability published as a string is ill-typed": (
        [_with("cudaComputeCapability", {"string": "10.0.0"})],
        "must be {version: ...}",
    ),
    "a compute capability that is no semantic version is refused": (
        [_with("cudaComputeCapability", {"version": "10.0"})],
        "is not a version",
    ),
    "an attribute with two typed values is ill-typed": (
        [_with("productName", {"string": "NVIDIA GB200", "int": 3})],
        "attribute productName",
    ),
    "a product name that is a number is ill-typed": (
        [_with("productName", {"int": 7})],
        "attribute productName",
    ),
    "a device without a type is not counted": ([_without("type")], "attribute type missing"),
    "a device without memory capacity is not counted": ([_capacity({})], "capacity memory"),
    "a memory capacity that is no quantity is refused": (
        [_capacity({"memory": {"value": "lots"}})],
        "capacity memory",
    ),
    "a memory capacity written as a bare quantity is the old shape": (
        [_capacity({"memory": "80Gi"})],
        "capacity memory",
    ),
    "a device without a name is not counted": ([{"attributes": {}}], "without a name"),
    "a device that is not an object is not counted": (["gpu-0"], "without a name"),
    "a device published twice makes the pool invalid": (
        [gpu_device(0), gpu_device(0)],
        "published twice",
    ),
}


@pytest.mark.parametrize("devices, problem", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_device_is_reported_and_never_makes_the_node_eligible(
    devices: list[Any], problem: str
) -> None:
    inventory = one(bare_node("t0"), gpu_slice("t0", devices=devices))
    facts = inventory.nodes[0]
    assert facts.dra is not None and any(problem in p for p in facts.problems), facts.problems
    # Never the 4 a GB200 pod needs.
    assert facts.gpus("nvidia.com/gpu") <= 1
    res = plan(MEGA, inventory, Observed.offline(), NOW).resolution
    assert res.placement.eligible == () and not res.placement.placeable


def test_a_node_with_only_malformed_devices_is_named_with_why() -> None:
    inventory = one(bare_node("t0"), gpu_slice("t0", devices=[_without("productName")]))
    res = plan(MEGA, inventory, Observed.offline(), NOW).resolution
    assert "t0: " in res.placement.message or "t0: " in res.message
    shown = res.placement.message + " ".join(c.message for c in res.checks)
    assert "attribute productName is missing" in shown


def test_a_half_published_pool_counts_nothing_until_every_slice_is_seen() -> None:
    first = gpu_slice("t0", count=2, slice_count=2, name="t0-a")
    facts = one(bare_node("t0"), first).nodes[0]
    assert facts.gpus("nvidia.com/gpu") == 0
    assert any("1 of 2 slices of generation 1" in p for p in facts.problems)
    second = gpu_slice("t0", slice_count=2, name="t0-b", devices=[gpu_device(2), gpu_device(3)])
    whole = one(bare_node("t0"), first, second).nodes[0]
    assert whole.gpus("nvidia.com/gpu") == 4 and whole.problems == ()


def test_a_pool_two_slices_publish_the_same_device_names_in_counts_nothing() -> None:
    """The scheduler calls a pool with a duplicate device name invalid and allocates none of
    its devices (two slices of one pool, gpu-0..3 each, one GB200 and one H200 slice)."""
    gb200 = gpu_slice("t0", count=4, slice_count=2, name="t0-a")
    h200 = gpu_slice("t0", count=4, slice_count=2, name="t0-b", product="NVIDIA H200", cc="9.0.0")
    inventory = one(bare_node("t0"), gb200, h200)
    facts = inventory.nodes[0]
    assert facts.gpus("nvidia.com/gpu") == 0
    (problem,) = facts.problems
    assert "ResourceSlice pool 't0': device 'gpu-0' (slices t0-a and t0-b)" in problem
    assert "the scheduler treats the pool as invalid" in problem
    res = plan(MEGA, inventory, Observed.offline(), NOW).resolution
    assert not res.placement.placeable and res.placement.eligible == ()
    assert "device 'gpu-0' (slices t0-a and t0-b)" in res.placement.message + " ".join(
        c.message for c in res.checks
    )


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    old = gpu_slice("t0", count=4, generation=1)
    new = gpu_slice("t0", count=2, generation=2)
    assert one(bare_node("t0"), old, new).nodes[0].gpus("nvidia.com/gpu") == 2
    assert one(bare_node("t0"), new, old).nodes[0].gpus("nvidia.com/gpu") == 2


def test_a_slice_for_an_unknown_node_is_reported_and_counted_nowhere() -> None:
    inventory = build_inventory([bare_node("t0")], [gpu_slice("t9")])
    assert inventory.nodes[0].dra is None
    assert inventory.slice_problems == (
        ("t9-gpu.nvidia.com-1", "names node 't9', which is not among the Nodes"),
    )
    res = plan(MEGA, inventory, Observed.offline(), NOW).resolution
    assert (
        "ResourceSlice t9-gpu.nvidia.com-1: names node 't9'"
        in " ".join(c.message for c in res.checks) + res.placement.message
    )


GARBAGE: dict[str, Any] = {
    "a slice that is a string": "not a slice",
    "a slice without spec": {"metadata": {"name": "s"}},
    "a slice tied to all nodes": {
        "metadata": {"name": "s"},
        "spec": {"driver": "gpu.nvidia.com", "allNodes": True},
    },
    "a pool generation that is text": {
        "metadata": {"name": "s"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "t0",
            "pool": {"name": "t0", "generation": "1"},
        },
    },
    "devices that are a map": {
        "metadata": {"name": "s"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "t0",
            "pool": {"name": "t0"},
            "devices": {"gpu-0": {}},
        },
    },
}


@pytest.mark.parametrize("item", GARBAGE.values(), ids=GARBAGE.keys())
def test_garbage_slices_are_reported_never_a_crash(item: Any) -> None:
    inventory = build_inventory([bare_node("t0")], [item])
    facts = inventory.nodes[0]
    assert facts.gpus("nvidia.com/gpu") == 0
    assert inventory.slice_problems or facts.problems


def test_slices_of_other_drivers_and_mig_devices_are_not_gpus() -> None:
    nic = gpu_slice("t0") | {"spec": {**gpu_slice("t0")["spec"], "driver": "nic.example.com"}}
    mig = _with("type", {"string": "mig"})
    facts = one(bare_node("t0"), nic, gpu_slice("t0", devices=[mig, gpu_device(1)])).nodes[0]
    assert facts.gpus("nvidia.com/gpu") == 1 and facts.problems == ()


def test_a_node_whose_devices_differ_is_mixed_never_sm100() -> None:
    devices = [gpu_device(0), gpu_device(1, product="NVIDIA H200", cc="9.0.0", memory="143771Mi")]
    facts = one(bare_node("t0"), gpu_slice("t0", devices=devices)).nodes[0]
    assert (facts.family, facts.cc, facts.product, facts.gpu_memory_mib) == (
        "mixed",
        None,
        "mixed",
        143771,
    )
    assert not facts.is_sm100


QUANTITIES = {
    "binary suffix": ("143771Mi", 143771 * 2**20),
    "plain bytes": ("85899345920", 85899345920),
    "decimal suffix": ("80G", 80 * 10**9),
    "exponent": ("1e3", 1000),
    "fraction": ("1.5Gi", 3 * 2**29),
    "unknown suffix": ("80GB", None),
    "negative": ("-1", None),
    "words": ("lots", None),
}


@pytest.mark.parametrize("text, value", QUANTITIES.values(), ids=QUANTITIES.keys())
def test_memory_quantities_parse_as_kubernetes_writes_them(text: str, value: int | None) -> None:
    assert parse_quantity_bytes(text) == value


def test_read_slices_keeps_the_pool_names_per_node() -> None:
    dra = read_slices([gpu_slice("a"), gpu_slice("b", pool="rack-b")], ["a", "b"])
    assert {n: g.pools for n, g in dra.by_node.items()} == {"a": ("a",), "b": ("rack-b",)}


def test_check_messages_name_the_slice_a_fact_came_from() -> None:
    h200 = gpu_slice("h0", count=8, product="NVIDIA H200", cc="9.0.0", memory="143771Mi")
    res = plan(MEGA, one(bare_node("h0"), h200), Observed.offline(), NOW).resolution
    arch = next(c for c in res.checks if c.name == "GPUArchitecture")
    assert "from gpu.nvidia.com ResourceSlice cudaComputeCapability='9.0.0' (DRA)" in arch.message
    assert "(DRA)" in arch.message


# --- the same decision on a label-only pool and on its DRA-only twin -----------------------------

SERVINGS = sorted(p.name for p in (ROOT / "examples").glob("dsv41-*.yaml"))
# The label-described pools (a *-dra.yaml file is already a DRA twin).
POOLS = sorted(
    p.name for p in (ROOT / "examples").glob("nodes-*.yaml") if not p.stem.endswith("-dra")
)


def _decision(serving: str, nodes: list[Any], slices: list[Any]) -> dict[str, Any]:
    body = yaml.safe_load((ROOT / "examples" / serving).read_text())
    res = plan(
        parse_serving(body), build_inventory(nodes, slices), Observed.offline(), NOW
    ).resolution
    return {
        "backend": res.moe_backend,
        "reason": res.reason,
        "sequence_parallel": res.sequence_parallel,
        "gpus_per_pod": res.gpus_per_pod,
        "eligible": res.placement.eligible,
        "capacity": res.placement.capacity,
        "placeable": res.placement.placeable,
        "checks": [(c.name, c.passed) for c in res.checks],
    }


@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("serving", SERVINGS)
def test_a_dra_only_pool_gets_the_decision_of_its_label_only_twin(serving: str, pool: str) -> None:
    nodes = load_nodes_file(str(ROOT / "examples" / pool))
    twins, slices = dra_only_pool(copy.deepcopy(nodes))
    assert slices and all(
        "nvidia.com/gpu" not in (t["status"].get("allocatable") or {}) for t in twins
    )
    dra_facts = build_inventory(twins, slices).nodes
    assert all(n.cc_source in (SOURCE_DRA, None) for n in dra_facts)
    assert _decision(serving, twins, slices) == _decision(serving, nodes, [])


def test_the_twin_of_a_node_without_gpus_has_no_slice() -> None:
    assert dra_only(bare_node("cpu-0"))[1] is None


# --- offline render: ResourceSlices beside Nodes in the --nodes file ------------------------------


def test_render_reads_slices_beside_nodes_and_decides_as_on_labels(capsys: Any) -> None:
    from deepseek_operator.cli import main

    serving = str(ROOT / "examples/dsv41-flash-gb200.yaml")
    assert main(["render", "-f", serving, "--nodes", str(ROOT / "examples/nodes-gb200-dra.yaml"), "-o", "json"]) == 0  # fmt: skip
    on_dra = json.loads(capsys.readouterr().out)
    assert main(["render", "-f", serving, "--nodes", str(ROOT / "examples/nodes-gb200.yaml"), "-o", "json"]) == 0  # fmt: skip
    on_labels = json.loads(capsys.readouterr().out)
    assert on_dra["status"]["resolved"] == on_labels["status"]["resolved"]
    assert on_dra["status"]["resolved"]["eligibleNodes"] == 4


def test_the_nodes_file_takes_node_and_slice_documents_and_lists(tmp_path: pathlib.Path) -> None:
    from deepseek_operator.commands.render.inputs import load_cluster_file

    slices = {"apiVersion": "v1", "kind": "ResourceSliceList", "items": [gpu_slice("t0")]}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([bare_node("t0") | {"kind": "Node"}, slices]))
    nodes, found = load_cluster_file(str(path))
    assert [n["metadata"]["name"] for n in nodes] == ["t0"] and len(found) == 1


REFUSED = {
    "a v1beta1 slice is refused with the version it must be": (
        gpu_slice("t0") | {"apiVersion": "resource.k8s.io/v1beta1"},
        "document 1 apiVersion: Unsupported value: 'resource.k8s.io/v1beta1': a ResourceSlice "
        "must be resource.k8s.io/v1",
    ),
    "a Pod is refused naming what the file may hold": (
        {"apiVersion": "v1", "kind": "Pod"},
        "document 1 is a Pod, not a Node, a ResourceSlice, a ResourceClaim or a List of them",
    ),
}


@pytest.mark.parametrize("doc, error", REFUSED.values(), ids=REFUSED.keys())
def test_the_nodes_file_refuses_what_it_cannot_read(
    tmp_path: pathlib.Path, doc: dict[str, Any], error: str
) -> None:
    from deepseek_operator.commands.render.inputs import load_cluster_file
    from deepseek_operator.errors import InputError

    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError, match=re.escape(error)):
        load_cluster_file(str(path))


# --- the operator's node index: slices kept beside the Nodes, merged per inventory ---------------


def test_the_node_tracker_merges_slices_into_their_nodes_facts() -> None:
    from deepseek_operator.nodes.dra import slice_of
    from deepseek_operator.nodes.facts import facts_of
    from deepseek_operator.nodes.tracker import NodeTracker

    tracker = NodeTracker()
    tracker.replace_all({"t0": facts_of(bare_node("t0")), "t1": facts_of(bare_node("t1"))})
    assert tracker.inventory().nodes[0].gpus("nvidia.com/gpu") == 0
    reduced = slice_of(gpu_slice("t0"))
    assert reduced is not None and slice_of(gpu_slice("t0") | {"spec": {"driver": "x"}}) is None
    changes = tracker.observe_slice("t0-slice", reduced)
    assert [c.after.name for c in changes if c.after] == ["t0"]
    assert tracker.observe_slice("t0-slice", reduced) == []  # the same slice again: no change
    t0, t1 = tracker.inventory().nodes
    assert (t0.gpus("nvidia.com/gpu"), t0.cc_source, t1.dra) == (4, SOURCE_DRA, None)
    # A node event keeps its slice: the merge happens per inventory, not per event.
    tracker.observe("t0", facts_of(bare_node("t0", {"team": "a"})))
    assert tracker.inventory().nodes[0].gpus("nvidia.com/gpu") == 4
    # A slice for a node the tracker does not know is reported in the inventory.
    tracker.observe_slice("t9-slice", slice_of(gpu_slice("t9")))
    assert [name for name, _ in tracker.inventory().slice_problems] == ["t9-gpu.nvidia.com-1"]
    changes = tracker.replace_slices({})
    assert [c.after.name for c in changes if c.after] == ["t0"]
    assert tracker.inventory().nodes[0].dra is None


def test_a_deleted_slice_is_a_change_of_its_node() -> None:
    from deepseek_operator.nodes.dra import slice_of
    from deepseek_operator.nodes.facts import facts_of
    from deepseek_operator.nodes.tracker import NodeTracker

    tracker = NodeTracker()
    tracker.replace_all({"t0": facts_of(bare_node("t0", {"pool": "p"}))})
    tracker.observe_slice("s", slice_of(gpu_slice("t0")))
    (change,) = tracker.observe_slice("s", None)
    assert change.may_affect({"pool": "p"}) and not change.may_affect({"pool": "q"})
    assert tracker.observe_slice("s", None) == []
