"""Free DRA devices: ResourceClaims hold devices, and capacity counts those no other claim holds."""

from __future__ import annotations

import copy
import json
import pathlib
from typing import Any

import pytest
import yaml

from deepseek_operator.api.load import parse_serving
from deepseek_operator.commands.render.inputs import load_cluster_file, load_cluster_inputs
from deepseek_operator.engine.disaggregated import resolve_roles
from deepseek_operator.nodes.claims import (
    ClaimOwner,
    HeldDevice,
    claim_of,
    held_devices,
    pod_of_workload,
)
from deepseek_operator.nodes.facts import build_inventory
from deepseek_operator.plan import Observed, Plan, claim_owner, plan
from tests.dra_slices import gpu_claim, gpu_slice
from tests.gpu_nodes import make_gpu_node

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOW = "2026-01-01T00:00:00Z"
DRA_POOL = str(ROOT / "examples/nodes-gb200-dra.yaml")
# A pod of the example's Deployment dsv41 (<deployment>-<pod-template-hash>-<suffix>).
OWN_POD = "dsv41-7d9f8b6c5d-x2x4z"


def _serving(name: str = "dsv41", **spec: Any) -> Any:
    body = yaml.safe_load((ROOT / "examples/dsv41-flash-gb200.yaml").read_text())
    body["metadata"]["name"] = name
    body["spec"].update(spec)
    return parse_serving(body)


def _plan(claims: list[Any], name: str = "dsv41", **spec: Any) -> Plan:
    nodes, slices = load_cluster_file(DRA_POOL)
    return plan(
        _serving(name, **spec), build_inventory(nodes, slices, claims), Observed.offline(), NOW
    )


def _taken(name: str = "other", pod: str | None = None, namespace: str = "batch") -> Any:
    return gpu_claim(name, "gb200-tray-0", ["gpu-0", "gpu-1"], namespace=namespace, pod=pod)


# --- the watch's reducer ---------------------------------------------------------------------


def test_the_reducer_keeps_only_the_held_devices_and_who_holds_them() -> None:
    claim = _taken(pod="trainer-0")
    claim["metadata"] |= {"uid": "u", "resourceVersion": "7", "labels": {"a": "b"}}
    assert claim_of(claim) == {
        "metadata": {
            "namespace": "batch",
            "name": "other",
            "pod": "trainer-0",
            "podClaim": "gpus",
        },
        "devices": [
            {"driver": "gpu.nvidia.com", "pool": "gb200-tray-0", "device": "gpu-0"},
            {"driver": "gpu.nvidia.com", "pool": "gb200-tray-0", "device": "gpu-1"},
        ],
    }
    # Reduced claims read as the full ones do (the operator keeps the reduced form).
    assert held_devices([claim_of(claim)]) == held_devices([claim])


def test_claims_that_hold_no_gpu_are_dropped() -> None:
    pending = _taken()
    del pending["status"]
    other_driver = _taken()
    for r in other_driver["status"]["allocation"]["devices"]["results"]:
        r["driver"] = "compute-domain.nvidia.com"
    admin = _taken()
    for r in admin["status"]["allocation"]["devices"]["results"]:
        r["adminAccess"] = True
    assert [claim_of(c) for c in (pending, other_driver, admin)] == [None, None, None]


GARBAGE: list[Any] = [
    None,
    "claim",
    [],
    {},
    {"metadata": "x"},
    {"metadata": {"name": 1, "namespace": "a"}},
    {"metadata": {"name": "c", "namespace": "a"}, "status": "x"},
    {"metadata": {"name": "c", "namespace": "a"}, "status": {"allocation": {"devices": []}}},
    {"metadata": {"name": "c", "namespace": "a"}, "status": {"allocation": {"devices": "x"}}},
    {"metadata": {"name": "c", "namespace": "a", "ownerReferences": "x"}, "status": {}},
    {"metadata": {"name": "c", "namespace": "a"}, "devices": [{"pool": 1}]},
]


@pytest.mark.parametrize("item", GARBAGE)
def test_malformed_claims_never_crash_and_hold_nothing(item: Any) -> None:
    assert claim_of(item) is None
    assert held_devices([item]) == ()


def test_malformed_entries_of_a_claim_are_skipped_and_the_rest_counted() -> None:
    claim = _taken(pod="trainer-0")
    results = claim["status"]["allocation"]["devices"]["results"]
    results += [None, "gpu-2", {"driver": "gpu.nvidia.com", "pool": 3, "device": "gpu-3"}]
    claim["metadata"]["ownerReferences"].insert(0, "garbage")
    (kept,) = [claim_of(claim)]
    assert kept is not None and [d["device"] for d in kept["devices"]] == ["gpu-0", "gpu-1"]
    assert kept["metadata"]["pod"] == "trainer-0"


# --- whose claim it is ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pod, ours",
    [
        (OWN_POD, True),  # a Deployment pod
        ("dsv41-0", True),  # a LeaderWorkerSet leader
        ("dsv41-3-2", True),  # a LeaderWorkerSet worker
        ("dsv41-b-7d9f8b6c5d-x2x4z", False),  # the Deployment dsv41-b's pod
        ("dsv41b-0", False),
        ("dsv41", False),
        ("other-0", False),
    ],
)
def test_a_claim_is_the_servings_own_when_a_pod_of_its_workload_owns_it(
    pod: str, ours: bool
) -> None:
    assert pod_of_workload(pod, "dsv41") is ours
    owner = ClaimOwner("llm", frozenset({"dsv41"}))
    assert owner.owns(HeldDevice("p", "gpu-0", "llm", "c", pod, "gpus")) is ours
    assert not owner.owns(HeldDevice("p", "gpu-0", "batch", "c", pod, "gpus"))  # namespace
    # Generated for another claim entry of the pod, or referenced by name: not the serving's.
    assert not owner.owns(HeldDevice("p", "gpu-0", "llm", "c", pod, "scratch"))
    assert not owner.owns(HeldDevice("p", "gpu-0", "llm", "c", pod, ""))


def test_a_same_named_pods_claim_for_another_claim_entry_is_not_the_servings() -> None:
    """A LeaderWorkerSet ``dsv41-1`` beside the serving ``dsv41``: its pod ``dsv41-1-0`` is
    named as a pod of both, but its claim, generated for its own claim entry, is not ours."""
    theirs = gpu_claim(
        "dsv41-1-0-accel-x", "gb200-tray-0", ["gpu-0", "gpu-1"], pod="dsv41-1-0", pod_claim="accel"
    )
    placeable = _plan([theirs]).resolution.placement.message
    assert "2 held by other claims" in placeable


def test_a_long_deployments_truncated_pod_names_are_recognised() -> None:
    workload = "a-very-long-deepseek-serving-name-for-the-research-team"  # 55 characters
    # ReplicaSet <workload>-7d9f8b6c5d; its pods' generateName base is cut to 58 characters.
    pod = (f"{workload}-7d9f8b6c5d-")[:58] + "x2x4z"
    assert len(pod) == 63 and pod_of_workload(pod, workload)
    assert not pod_of_workload(pod, workload[:-1])
    assert not pod_of_workload(pod[:58] + "x2x4", workload)


def test_a_disaggregated_serving_owns_both_roles_claims() -> None:
    body = yaml.safe_load((ROOT / "examples/dsv41-flash-1p1d-gb200.yaml").read_text())
    owner = claim_owner(parse_serving(body))
    name = body["metadata"]["name"]
    assert owner.workloads == {f"{name}-prefill", f"{name}-decode"}


# --- capacity from free devices ---------------------------------------------------------------


def test_devices_taken_by_another_claim_are_not_counted_as_free() -> None:
    free = _plan([], replicas=4).resolution.placement
    assert (free.capacity, free.placeable) == (4, True)
    assert "counted from free DRA devices: 16 of 16 devices free" in free.message
    taken = _plan([_taken()], replicas=4).resolution.placement
    assert (taken.capacity, taken.placeable) == (3, False)
    assert "gb200-tray-0" not in taken.eligible
    assert "gb200-tray-0: 2 of 4 devices free, 2 held by other claims < 4 per pod" in taken.message
    assert "14 of 16 devices free, 2 held by other claims" in taken.message


def test_devices_held_by_the_servings_own_pods_count_as_free_for_it() -> None:
    own = _taken("dsv41-gpus-abcde", pod=OWN_POD, namespace="llm")
    mine = _plan([own], replicas=4)
    assert mine.resolution.placement.capacity == 4
    assert "16 of 16 devices free" in mine.resolution.placement.message
    # The same claim is another serving's: not free for it (and not shared from the memo).
    nodes, slices = load_cluster_file(DRA_POOL)
    inventory = build_inventory(nodes, slices, [own])
    first = plan(_serving(replicas=4), inventory, Observed.offline(), NOW)
    second = plan(_serving("other", replicas=4), inventory, Observed.offline(), NOW)
    assert (first.resolution.placement.capacity, second.resolution.placement.capacity) == (4, 3)


def test_the_queueing_rule_asks_for_what_free_devices_hold_plus_max_pending() -> None:
    planned = _plan([_taken()], replicas=4, maxPendingReplicas=0)
    (deployment,) = [o for o in planned.objects if o["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 3
    placeable = next(c for c in planned.status.conditions if c.type == "Placeable")
    assert "1 of 4 replicas held back" in placeable.message


def test_a_held_device_of_no_known_node_counts_nowhere() -> None:
    stray = gpu_claim("x", "no-such-pool", ["gpu-0"], namespace="batch")
    assert _plan([stray], replicas=4).resolution.placement.capacity == 4


# --- offline render: claims beside Nodes and ResourceSlices -----------------------------------


def test_render_reads_claims_from_the_nodes_file_as_the_operator_does(
    tmp_path: pathlib.Path, capsys: Any
) -> None:
    from deepseek_operator.cli import main

    listed = {"apiVersion": "v1", "kind": "List", "items": [_taken()]}
    path = tmp_path / "cluster.yaml"
    path.write_text(pathlib.Path(DRA_POOL).read_text() + "\n---\n" + yaml.safe_dump(listed))
    nodes, slices, claims = load_cluster_inputs(str(path))
    assert (len(nodes), len(slices), len(claims)) == (4, 4, 1)
    dss = tmp_path / "dss.yaml"
    body = yaml.safe_load((ROOT / "examples/dsv41-flash-gb200.yaml").read_text())
    body["spec"]["replicas"] = 4
    dss.write_text(yaml.safe_dump(body))
    assert main(["render", "-f", str(dss), "--nodes", str(path), "-o", "json"]) == 0
    status = json.loads(capsys.readouterr().out)["status"]
    placeable = next(c for c in status["conditions"] if c["type"] == "Placeable")
    assert placeable["status"] == "False"
    assert "2 of 4 devices free, 2 held by other claims" in placeable["message"]
    expected = _plan([copy.deepcopy(_taken())], replicas=4).resolution.placement.message
    assert placeable["message"].startswith(expected)


# --- the operator's index: claims kept beside slices, merged per inventory ---------------------


def test_the_node_tracker_counts_what_claims_hold_and_releases_it() -> None:
    from deepseek_operator.nodes.dra import slice_of
    from deepseek_operator.nodes.facts import facts_of
    from deepseek_operator.nodes.tracker import NodeTracker

    nodes, slices = load_cluster_file(DRA_POOL)
    tracker = NodeTracker()
    tracker.replace_all({n["metadata"]["name"]: facts_of(n) for n in nodes})
    tracker.replace_slices({s["metadata"]["name"]: slice_of(s) for s in slices})
    changes = tracker.replace_claims({"batch/other": claim_of(_taken())})
    assert [c.after.name for c in changes if c.after] == ["gb200-tray-0"]
    tray = tracker.inventory().named("gb200-tray-0")
    assert tray is not None and tray.free_gpus("nvidia.com/gpu") == 2
    assert tracker.observe_claim("batch/other", claim_of(_taken())) == []  # no change
    # Deallocated (the reducer drops it) or deleted: the node's devices are free again.
    (change,) = tracker.observe_claim("batch/other", None)
    assert change.after is not None and change.after.name == "gb200-tray-0"
    tray = tracker.inventory().named("gb200-tray-0")
    assert tray is not None and tray.free_gpus("nvidia.com/gpu") == 4


def test_the_documented_claims_example_renders_what_operations_md_shows(
    tmp_path: pathlib.Path, capsys: Any
) -> None:
    from deepseek_operator.cli import main

    cluster = tmp_path / "cluster.yaml"  # cat nodes-gb200-dra.yaml claims-gb200-dra.yaml
    cluster.write_text(
        pathlib.Path(DRA_POOL).read_text() + (ROOT / "examples/claims-gb200-dra.yaml").read_text()
    )
    serving = str(ROOT / "examples/dsv41-flash-gb200.yaml")
    assert main(["render", "-f", serving, "--nodes", str(cluster)]) == 0
    out = capsys.readouterr().out
    doc = (ROOT / "docs/operations.md").read_text()
    shown = doc.split("the render\nof `examples/dsv41-flash-gb200.yaml` says\n\n```text\n")[1]
    placeable_line = shown.split("\n")[0]
    condition, status, reason, message = placeable_line.split(None, 3)
    (line,) = [x for x in out.splitlines() if x.strip().startswith("Placeable ")]
    assert line.split(None, 3) == [condition, status, reason, message]


def test_a_disaggregated_serving_counts_both_roles_claims_free_and_fits_them_together() -> None:
    body = yaml.safe_load((ROOT / "examples/dsv41-flash-1p1d-gb200.yaml").read_text())
    devices = [f"gpu-{i}" for i in range(4)]
    others = [gpu_claim(f"o{i}", f"gb200-tray-{i}", devices, namespace="batch") for i in (1, 2, 3)]
    # The decode pool's running pod holds tray 0: free for both roles, not for both at once.
    decode = gpu_claim("d", "gb200-tray-0", devices, pod="dsv41-pd-decode-7d9f8b6c5d-x2x4z")
    nodes, slices = load_cluster_file(DRA_POOL)
    inventory = build_inventory(nodes, slices, [*others, decode])
    serving = parse_serving(body)
    roles = resolve_roles(serving.spec, inventory, {}, None, owner=claim_owner(serving))
    for role in roles:  # each role alone: tray 0 is the serving's own, the rest is taken
        placement = role.resolution.placement
        assert placement.capacity == 1 and placement.eligible == ("gb200-tray-0",)
    planned = plan(serving, inventory, Observed.offline(), NOW)
    placeable = next(c for c in planned.status.conditions if c.type == "Placeable")
    assert placeable.status == "False"
    assert "prefill 1/1 pod(s) of 4 GPUs, decode 0/1 pod(s) of 4 GPUs placed" in placeable.message


# --- consumable capacity ----------------------------------------------------------------------


def _shared_tray(default: str | None) -> Any:
    """One DRA tray whose four GPUs allow multiple allocations (consumable capacity)."""
    slice_ = gpu_slice("t0", count=4)
    for device in slice_["spec"]["devices"]:
        device["allowMultipleAllocations"] = True
        if default is not None:
            device["capacity"]["memory"]["requestPolicy"] = {"default": default}
    return slice_


def _share(consumed: str, device: str = "gpu-0") -> Any:
    claim = gpu_claim("share", "t0", [device], namespace="batch", pod="notebook-0")
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    result |= {"shareID": "3b5f7e0c-0000-4000-8000-000000000000"}
    result["consumedCapacity"] = {"memory": consumed}
    return claim


@pytest.mark.parametrize(
    "default, consumed, free",
    [
        # Without a request policy, a claim that asks no capacity consumes all of it: any
        # share already taken leaves no room (the scheduler's fillEmptyRequest).
        (None, "10Gi", 3),
        # With a default of 40Gi, a whole-GPU claim consumes 40Gi: room beside a 100Gi share
        # of 185Gi, none beside a 150Gi one.
        ("40Gi", "100Gi", 4),
        ("40Gi", "150Gi", 3),
    ],
)
def test_a_shared_device_counts_as_the_scheduler_counts_its_capacity(
    default: str | None, consumed: str, free: int
) -> None:
    node = make_gpu_node("t0", "NVIDIA-GB200", agent_labels=None)
    node["status"]["allocatable"].pop("nvidia.com/gpu", None)
    inventory = build_inventory([node], [_shared_tray(default)], [_share(consumed)])
    facts = inventory.nodes[0]
    assert facts.free_gpus("nvidia.com/gpu") == free
    # A claim we cannot read the share of holds the device whole (the cautious count).
    unreadable = _share("lots")
    assert (
        build_inventory([node], [_shared_tray(default)], [unreadable])
        .nodes[0]
        .free_gpus("nvidia.com/gpu")
        == 3
    )


def test_an_exclusive_device_is_held_whole_by_any_allocation() -> None:
    node = make_gpu_node("t0", "NVIDIA-GB200", agent_labels=None)
    node["status"]["allocatable"].pop("nvidia.com/gpu", None)
    # consumedCapacity on a device that does not allow multiple allocations changes nothing.
    inventory = build_inventory([node], [gpu_slice("t0", count=4)], [_share("1Gi")])
    assert inventory.nodes[0].free_gpus("nvidia.com/gpu") == 3


def test_the_reducer_keeps_what_a_share_consumes() -> None:
    kept = claim_of(_share("10Gi"))
    assert kept is not None and kept["devices"][0]["consumed"] == {"memory": "10Gi"}
    assert held_devices([kept]) == held_devices([_share("10Gi")])
    assert held_devices([kept])[0].consumed == (("memory", "10Gi"),)
