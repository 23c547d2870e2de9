"""The operator on a DRA-only pool: GPU facts from ResourceSlices, GPUs through claims.

kwok nodes with no ``nvidia.com/gpu`` allocatable and no GPU labels but for the agent's NVLink
ones, NVIDIA-shaped ``gpu.nvidia.com`` ResourceSlices made by hand (owned by their Nodes) and the
driver's DeviceClass: the session operator reads the slices through its watch, renders the
ResourceClaimTemplate, and the real kube-scheduler allocates each pod's claim. Another pod's
claim takes devices (the operator's ResourceClaim watch counts them as not free), and a
ComputeDomain channel device with binding conditions keeps its pod unbound until the test, in
the compute-domain controller's place, sets the condition (the scheduler's
DRADeviceBindingConditions, beta and on by default in the pinned v1.36).
"""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.dra_slices import dra_only, gpu_device_class, gpu_slice, owned_by
from tests.e2e.test_operator import AGENT_OK, _get, _pods
from tests.gpu_nodes import make_gpu_node
from tests.k8s.cluster import ControlPlane, wait_for
from tests.k8s.conditions import condition, wait_condition
from tests.k8s.dra import CHANNEL_CLASS, device_classes, resource_slice
from tests.k8s.operator import OperatorProcess
from tests.servings import PD_GB200, serving

pytestmark = pytest.mark.e2e
REPO = pathlib.Path(__file__).resolve().parents[2]


def _dra_pool(
    cp: ControlPlane, node_factory: Callable[..., list[Any]], pool: str, *products: str
) -> list[str]:
    """DRA-only twins of one node per product (pool=<pool>), created with their slices."""
    twins = []
    for i, product in enumerate(products):
        agent = AGENT_OK if product == "NVIDIA-GB200" else None
        node = make_gpu_node(
            f"{pool}-{i}", product, agent_labels=agent, extra_labels={"pool": pool}
        )
        twins.append(dra_only(node))
    created = node_factory(*(twin for twin, _ in twins))
    cp.apply(gpu_device_class())
    cp.apply([owned_by(s, n) for (_, s), n in zip(twins, created, strict=True) if s])
    return [n["metadata"]["name"] for n in created]


def test_a_dra_only_pool_serves_mega_moe_through_a_gpu_claim(
    operator: OperatorProcess, full_cluster: ControlPlane, namespace: str, node_factory: Any
) -> None:
    cp = full_cluster
    tray, h200 = _dra_pool(cp, node_factory, namespace, "NVIDIA-GB200", "NVIDIA-H200")
    cp.apply(serving(namespace))
    obj = wait_condition(cp, namespace, "Ready", "True", timeout=300)
    assert obj["status"]["resolved"]["moeBackend"] == "deep_gemm_mega_moe"
    template = _get(cp, namespace, "resourceclaimtemplate", "dsv41-gpus")
    assert template["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    container = _get(cp, namespace, "deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in container["resources"].get("limits", {})
    (pod,) = _pods(cp, namespace)
    assert pod["spec"]["nodeName"] == tray
    (claim,) = cp.kubectl_json("get", "resourceclaims", "-n", namespace)["items"]
    results = claim["status"]["allocation"]["devices"]["results"]
    assert {r["pool"] for r in results} == {tray} and len(results) == 4
    # The decision says where each fact came from.
    arch = next(c for c in obj["status"]["decision"]["checks"] if c["name"] == "GPUArchitecture")
    assert "gpu.nvidia.com ResourceSlice cudaComputeCapability='10.0.0' (DRA)" in arch["message"]
    assert h200 not in {p["spec"]["nodeName"] for p in _pods(cp, namespace)}


def test_explicit_mega_moe_on_a_dra_h200_pool_is_pending_with_the_reason(
    operator: OperatorProcess, full_cluster: ControlPlane, namespace: str, node_factory: Any
) -> None:
    cp = full_cluster
    _dra_pool(cp, node_factory, namespace, "NVIDIA-H200")
    cp.apply(serving(namespace, moeBackend="deep_gemm_mega_moe"))
    obj = wait_condition(cp, namespace, "Placeable", "False", timeout=120)
    assert "cudaComputeCapability='9.0.0' (DRA)" in condition(obj, "BackendResolved")["message"]

    def pending() -> list[dict[str, Any]] | None:
        pods = _pods(cp, namespace)
        return pods if pods and all(p["status"].get("phase") == "Pending" for p in pods) else None

    wait_for(pending, timeout=60, what="the serving pod Pending")
    assert _get(cp, namespace, "resourceclaimtemplate", "dsv41-gpus")


def _claiming_pod(namespace: str, name: str, request: str, claim: str) -> dict[str, Any]:
    """A pod on the pool's node whose container uses the ResourceClaim ``claim`` (as ``request``)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": {"pool": namespace},
            "resourceClaims": [{"name": request, "resourceClaimName": claim}],
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"claims": [{"name": request}]}}
            ],
        },
    }


def _holder(namespace: str, count: int) -> list[dict[str, Any]]:
    """Another workload's claim of ``count`` GPUs and the pod that uses it, on the pool's node:
    the real scheduler allocates the claim, so its devices are taken as on a live cluster."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "holder-gpus", "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {
                            "deviceClassName": "gpu.nvidia.com",
                            "allocationMode": "ExactCount",
                            "count": count,
                        },
                    }
                ]
            }
        },
    }
    return [claim, _claiming_pod(namespace, "holder", "gpus", "holder-gpus")]


def test_devices_another_claim_holds_are_not_free_and_the_servings_own_are(
    operator: OperatorProcess, full_cluster: ControlPlane, namespace: str, node_factory: Any
) -> None:
    cp = full_cluster
    (tray,) = _dra_pool(cp, node_factory, namespace, "NVIDIA-GB200")
    cp.apply(_holder(namespace, 2))

    def allocated() -> dict[str, Any] | None:
        claim = _get(cp, namespace, "resourceclaim", "holder-gpus")
        return claim if (claim.get("status") or {}).get("allocation") else None

    held = wait_for(allocated, timeout=60, what="the holder's claim allocated")
    assert held is not None
    assert {r["pool"] for r in held["status"]["allocation"]["devices"]["results"]} == {tray}
    # One 4-GPU replica wanted, 2 of the tray's 4 devices taken: not placeable, and with
    # maxPendingReplicas 0 the queueing rule asks for no replica at all.
    cp.apply(serving(namespace, maxPendingReplicas=0))
    obj = wait_condition(cp, namespace, "Placeable", "False", timeout=120)
    message = condition(obj, "Placeable")["message"]
    assert f"{tray}: 2 of 4 devices free, 2 held by other claims < 4 per pod" in message
    assert "1 of 1 replicas held back" in message
    wait_for(
        lambda: _get(cp, namespace, "deployment")["spec"]["replicas"] == 0,
        timeout=60,
        what="the Deployment asking for 0 replicas",
    )
    assert _pods(cp, namespace) == []
    # The holder goes: its devices are free, the replica is asked for and its pod claims all
    # four. The serving's own claim then holds them, and Placeable stays True (its own).
    cp.kubectl("delete", "pod/holder", "resourceclaim/holder-gpus", "-n", namespace)
    obj = wait_condition(cp, namespace, "Placeable", "True", timeout=120)
    assert "4 of 4 devices free" in condition(obj, "Placeable")["message"]

    def scheduled() -> list[dict[str, Any]] | None:
        pods = _pods(cp, namespace)
        return pods if pods and all(p["spec"].get("nodeName") for p in pods) else None

    pods = wait_for(scheduled, timeout=120, what="the serving pod scheduled")
    assert pods is not None
    (pod,) = pods
    assert pod["spec"]["nodeName"] == tray
    (claim,) = cp.kubectl_json("get", "resourceclaims", "-n", namespace)["items"]
    assert len(claim["status"]["allocation"]["devices"]["results"]) == 4
    # A later reconcile (a spec change) sees the serving's own claim holding all four devices.
    cp.kubectl(
        "patch", "dss", "dsv41", "-n", namespace, "--type=merge", "-p",
        '{"spec": {"maxPendingReplicas": 1}}',
    )  # fmt: skip

    def decided_again() -> dict[str, Any] | None:
        obj = _get(cp, namespace)
        cond = condition(obj, "Placeable")
        fresh = obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
        return obj if fresh and "4 of 4 devices free" in cond.get("message", "") else None

    again = wait_for(decided_again, timeout=120, what="Placeable counting its own claim as free")
    assert again is not None and condition(again, "Placeable")["status"] == "True"


def test_a_pool_the_scheduler_rejects_counts_no_device(
    operator: OperatorProcess, full_cluster: ControlPlane, namespace: str, node_factory: Any
) -> None:
    """Two slices of one pool publish gpu-0..3 each (one GB200, one H200): the scheduler calls
    the pool invalid and allocates none of its devices, and the operator counts none of them."""
    cp = full_cluster
    node = make_gpu_node(
        f"{namespace}-0", "NVIDIA-GB200", agent_labels=AGENT_OK, extra_labels={"pool": namespace}
    )
    twin, _ = dra_only(node)
    (created,) = node_factory(twin)
    tray = created["metadata"]["name"]
    halves = [
        gpu_slice(tray, count=4, slice_count=2, name=f"{tray}-a"),
        gpu_slice(
            tray, count=4, slice_count=2, name=f"{tray}-b", product="NVIDIA H200", cc="9.0.0"
        ),
    ]
    cp.apply(gpu_device_class())
    cp.apply([owned_by(s, created) for s in halves])
    cp.apply(serving(namespace))
    obj = wait_condition(cp, namespace, "Placeable", "False", timeout=120)
    shown = json.dumps(obj["status"])
    assert f"ResourceSlice pool '{tray}': device 'gpu-0' (slices {tray}-a and {tray}-b)" in shown
    assert (obj["status"].get("resolved") or {}).get("moeBackend") != "deep_gemm_mega_moe"
    # The real scheduler agrees: another workload's one-GPU claim on that node is never allocated.
    cp.apply(_holder(namespace, 1))

    def refused() -> str | None:
        events = cp.kubectl_json(
            "get", "events", "-n", namespace, "--field-selector", "involvedObject.name=holder"
        )["items"]
        return next((e["message"] for e in events if e.get("reason") == "FailedScheduling"), None)

    message = wait_for(refused, timeout=60, what="the holder pod refused by the scheduler")
    assert message is not None and "invalid" in message, message
    claim = _get(cp, namespace, "resourceclaim", "holder-gpus")
    assert not (claim.get("status") or {}).get("allocation")


def test_a_pair_that_fits_each_role_alone_but_not_both_is_not_created(
    operator: OperatorProcess, full_cluster: ControlPlane, namespace: str, node_factory: Any
) -> None:
    """Two DRA trays, one device of one tray already claimed: render refuses the 1P1D pair, and
    the operator creates neither role (not a prefill pool Running beside a decode pool that
    stays Pending); once the claim goes, both roles are created."""
    cp = full_cluster
    _dra_pool(cp, node_factory, namespace, "NVIDIA-GB200", "NVIDIA-GB200")
    cp.apply(_holder(namespace, 1))
    wait_for(
        lambda: (_get(cp, namespace, "resourceclaim", "holder-gpus").get("status") or {}).get(
            "allocation"
        ),
        timeout=60,
        what="the holder's claim allocated",
    )
    cp.apply(serving(namespace, "pd", example=PD_GB200))  # TP4 per role, one tray each
    obj = wait_condition(cp, namespace, "Placeable", "False", name="pd", timeout=120)
    assert "hold each pool alone but not both together" in condition(obj, "Placeable")["message"]
    assert "nothing is created until both roles can run" in condition(obj, "Ready")["message"]
    time.sleep(3)  # a reconcile that wrongly wrote the workloads would have done so by now
    assert cp.kubectl_json("get", "deployments", "-n", namespace)["items"] == []
    cp.kubectl("delete", "pod/holder", "resourceclaim/holder-gpus", "-n", namespace)
    wait_condition(cp, namespace, "Placeable", "True", name="pd", timeout=120)
    # Both roles' Deployments and the router's (pd-api), together.
    expected = ["pd-api", "pd-decode", "pd-prefill"]
    wait_for(
        lambda: (
            sorted(
                d["metadata"]["name"]
                for d in cp.kubectl_json("get", "deployments", "-n", namespace)["items"]
            )
            == expected
        ),
        timeout=60,
        what=f"the Deployments {expected}",
    )


READY, FAILED = "ComputeDomainReady", "ComputeDomainFailed"  # condition types the test picks


def test_a_compute_domain_binding_condition_set_by_the_test_releases_the_pod(
    full_cluster: ControlPlane, namespace: str, node_factory: Any
) -> None:
    cp = full_cluster
    (tray,) = _dra_pool(cp, node_factory, namespace, "NVIDIA-GB200")
    node = cp.kubectl_json("get", "node", tray)
    channel = resource_slice(node)
    channel["metadata"]["name"] = f"{tray}-binding-channel"
    for device in channel["spec"]["devices"]:
        # What a compute-domain controller publishes when the channel is usable only once the
        # domain's IMEX daemons run: the scheduler waits in PreBind for READY on the claim.
        device |= {"bindingConditions": [READY], "bindingFailureConditions": [FAILED]}
    cp.apply(device_classes())
    cp.apply(channel)
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "channel", "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [{"name": "channel", "exactly": {"deviceClassName": CHANNEL_CLASS}}]
            }
        },
    }
    cp.apply([claim, _claiming_pod(namespace, "imex", "channel", "channel")])

    def allocated() -> dict[str, Any] | None:
        got = _get(cp, namespace, "resourceclaim", "channel")
        return got if (got.get("status") or {}).get("allocation") else None

    got = wait_for(allocated, timeout=60, what="the channel claim allocated")
    assert got is not None
    (result,) = got["status"]["allocation"]["devices"]["results"]
    assert (result["pool"], result["device"]) == (tray, "channel-0")
    assert result.get("bindingConditions") == [READY]
    # Allocated, yet the pod stays unbound while the condition is not set.
    for _ in range(10):
        assert not _get(cp, namespace, "pod", "imex")["spec"].get("nodeName")
        time.sleep(0.5)
    status = {
        "status": {
            "devices": [
                {
                    "driver": result["driver"],
                    "pool": result["pool"],
                    "device": result["device"],
                    "conditions": [
                        {
                            "type": READY,
                            "status": "True",
                            "reason": "IMEXDaemonsReady",
                            "message": "set by the test in the controller's place",
                            "lastTransitionTime": "2026-01-01T00:00:00Z",
                        }
                    ],
                }
            ]
        }
    }
    cp.kubectl(
        "patch", "resourceclaim", "channel", "-n", namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps(status),
    )  # fmt: skip
    bound = wait_for(
        lambda: _get(cp, namespace, "pod", "imex")["spec"].get("nodeName"),
        timeout=120,
        what="the pod bound once the binding condition is True",
    )
    assert bound == tray
    cp.kubectl("delete", "pod/imex", "resourceclaim/channel", "-n", namespace, "--wait=false")
    cp.kubectl("delete", "resourceslice", channel["metadata"]["name"], "--ignore-not-found")
