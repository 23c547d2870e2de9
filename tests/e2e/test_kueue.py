"""Kueue admission end to end: the operator, the real Kueue, LWS controllers and scheduler, kwok
GB200 trays.

A ClusterQueue with 12 nvidia.com/gpu: one DEP8 group (two pods of four GPUs) and half of another.
Two servings of one such group each, both in its LocalQueue through ``spec.queueName``: the
first is admitted and runs; the second waits whole (both its pods held by Kueue's scheduling
gate, none bound to a node, although one pod's four GPUs would fit in the quota left) until the
first is deleted, and then starts whole. The status says why at every step: ``Admitted`` (from
Kueue's Workloads, with Kueue's message while one waits) and ``Ready`` (``WaitingForQuota``).
"""

from __future__ import annotations

import copy
import json
import pathlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from tests.k8s.cluster import ControlPlane, unique_name, wait_for
from tests.k8s.conditions import condition, wait_condition
from tests.k8s.dra import ComputeDomainDriver
from tests.k8s.kueue import (
    GATE,
    admission_check,
    cluster_queue,
    local_queue,
    resource_flavor,
    workload_priority_class,
)
from tests.k8s.operator import OperatorProcess
from tests.racks import two_racks

pytestmark = pytest.mark.e2e

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((REPO / "examples/dsv41-flash-dep8-nvl72.yaml").read_text())
SEED = yaml.safe_load((REPO / "examples/dsv41-flash-gb200.yaml").read_text())
PAIR = yaml.safe_load((REPO / "examples/dsv41-flash-1p1d-gb200.yaml").read_text())
ROLE_LABEL = "serving.deepseek-operator.io/pd-role"
DEP8 = {
    "tensorParallelSize": 1,
    "dataParallelSize": 8,
    "dataParallelSizeLocal": 4,
    "expertParallel": True,
}
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
QUEUE = "gpu"
GROUP_GPUS = 8  # DEP8: two pods of four GPUs
QUOTA_GPUS = GROUP_GPUS + GROUP_GPUS // 2  # one group and half of another


def _serving(name: str, namespace: str) -> dict[str, Any]:
    """One group of 2 pods (DEP8 as 2 x 4 GPUs) on this test's trays, in LocalQueue ``gpu``."""
    doc = copy.deepcopy(EXAMPLE)
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"].pop("tolerations", None)
    doc["spec"]["replicas"] = 1
    doc["spec"]["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    doc["spec"]["nodeSelector"] = {"pool": namespace}
    doc["spec"]["queueName"] = QUEUE
    return doc


def _pair(name: str, namespace: str) -> dict[str, Any]:
    """A prefill/decode pair, each role one DEP8 group (2 x 4 GPUs), in LocalQueue ``gpu``."""
    doc = copy.deepcopy(PAIR)
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"].pop("tolerations", None)
    doc["spec"]["nodeSelector"] = {"pool": namespace}
    doc["spec"]["queueName"] = QUEUE
    for role in doc["spec"]["disaggregation"]["roles"]:
        role["parallelism"] = dict(DEP8)
        role["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    return doc


@pytest.fixture
def racks(
    kueue_cluster: ControlPlane,
    compute_domain_driver: ComputeDomainDriver,
    namespace: str,
    node_factory: Callable[..., list[Any]],
) -> list[Any]:
    """This test's trays (pool=<namespace>): room for both servings, so only quota holds one."""
    nodes = two_racks(unique_name("kq"))
    for node in nodes:
        node["metadata"]["labels"]["pool"] = namespace
    created = node_factory(*nodes)
    compute_domain_driver.publish(created)
    return created


@dataclass(frozen=True)
class Queued:
    """One test's set-up: the cluster with Kueue and LWS, the operator running, this test's trays
    (pool=<namespace>), and ``queue(gpus)``, which makes LocalQueue ``gpu`` in the namespace."""

    cp: ControlPlane
    namespace: str
    queue: Callable[..., str]


@pytest.fixture
def queued(
    kueue_cluster: ControlPlane, operator: OperatorProcess, namespace: str, racks: list[Any]
) -> Iterator[Queued]:
    """``queued.queue(gpus, preempt_lower=False)``: a ClusterQueue of ``gpus`` GPUs (its
    Workloads preempting lower-priority ones with ``preempt_lower``) and LocalQueue ``gpu`` over
    it; returns the ClusterQueue's name. The ClusterQueues go after the test."""
    cp = kueue_cluster
    made: list[str] = []

    def make(gpus: int, *, preempt_lower: bool = False) -> str:
        cq = unique_name("gpus")
        cp.apply(resource_flavor())
        cp.apply(cluster_queue(cq, gpus=gpus, preempt_lower=preempt_lower))
        cp.apply(local_queue(QUEUE, namespace, cq))
        made.append(cq)
        return cq

    yield Queued(cp, namespace, make)
    for cq in made:
        cp.kubectl("delete", "clusterqueue", cq, "--wait=false", "--ignore-not-found", check=False)


def _pods(cp: ControlPlane, namespace: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cp.kubectl_json(
        "get", "pods", "-n", namespace, "-l", f"{LWS_NAME_LABEL}={name}"
    )["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _whole(pods: list[dict[str, Any]], count: int) -> list[dict[str, Any]] | None:
    """``pods`` when they are ``count`` and all Running, else None."""
    running = [p for p in pods if p["status"].get("phase") == "Running"]
    return running if len(running) == count == len(pods) else None


def _running(cp: ControlPlane, namespace: str, name: str) -> list[dict[str, Any]] | None:
    return _whole(_pods(cp, namespace, name), 2)


def _workloads(cp: ControlPlane, namespace: str, owner: str) -> list[dict[str, Any]]:
    """Kueue's Workloads owned by LeaderWorkerSet ``owner`` (one per group)."""
    items = cp.kubectl_json("get", "workloads.kueue.x-k8s.io", "-n", namespace)["items"]
    return [
        w
        for w in items
        if any(
            r.get("kind") == "LeaderWorkerSet" and r.get("name") == owner
            for r in w["metadata"].get("ownerReferences") or []
        )
    ]


def _cond(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return dict(next((c for c in conditions if c["type"] == ctype), {}))


def _gated(pod: dict[str, Any]) -> bool:
    return any(g["name"] == GATE for g in pod["spec"].get("schedulingGates") or [])


def test_second_serving_waits_whole_for_quota_and_starts_whole_when_freed(queued: Queued) -> None:
    cp, namespace = queued.cp, queued.namespace
    queued.queue(QUOTA_GPUS)
    cp.apply(_serving("first", namespace))
    first = wait_for(lambda: _running(cp, namespace, "first"), timeout=240, what="first Running")
    assert all(not _gated(p) for p in first)
    (wl,) = _workloads(cp, namespace, "first")
    assert _cond(wl, "Admitted").get("status") == "True", wl.get("status")
    # One Workload for the whole group: the leader and its worker are its pod sets.
    assert sum(ps["count"] for ps in wl["spec"]["podSets"]) == 2
    wait_condition(cp, namespace, "Admitted", "True", reason="Admitted", name="first")

    cp.apply(_serving("second", namespace))

    def pending() -> dict[str, Any] | None:
        found = _workloads(cp, namespace, "second")
        if len(found) != 1:
            return None
        reserved = _cond(found[0], "QuotaReserved")
        return found[0] if reserved.get("status") == "False" else None

    waiting = wait_for(pending, timeout=120, what="second's Workload pending on quota")
    message = _cond(waiting, "QuotaReserved")["message"]
    assert "nvidia.com/gpu" in message, message
    # Kueue has decided: the group does not fit. Half of it would (4 of the 12 GPUs are free),
    # yet no pod of it is bound; every pod that exists waits behind Kueue's gate.
    pods = wait_for(
        lambda: (p := _pods(cp, namespace, "second")) and len(p) == 2 and p,
        timeout=60,
        what="second's two pods created",
    )
    assert all(_gated(p) and not p["spec"].get("nodeName") for p in pods), [
        (p["metadata"]["name"], p["spec"].get("schedulingGates"), p["spec"].get("nodeName"))
        for p in pods
    ]
    # The serving says it waits for quota, in Kueue's words, not for nodes.
    # The status follows Kueue's Workload events: an earlier Pending may not carry its message yet.
    obj = wait_for(
        lambda: (
            (o := cp.kubectl_json("get", "dss", "second", "-n", namespace))
            and condition(o, "Admitted").get("reason") == "Pending"
            and message in condition(o, "Admitted").get("message", "")
            and o
        ),
        timeout=180,
        what="second's Admitted: Pending with Kueue's message",
    )
    ready = condition(obj, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "WaitingForQuota"), ready
    assert condition(obj, "Placeable")["status"] == "True"  # the nodes are there

    cp.kubectl("delete", "dss", "first", "-n", namespace, "--wait=false")
    second = wait_for(
        lambda: _running(cp, namespace, "second"), timeout=240, what="second Running whole"
    )
    assert all(not _gated(p) and p["spec"].get("nodeName") for p in second)
    (wl,) = _workloads(cp, namespace, "second")
    assert _cond(wl, "Admitted").get("status") == "True", wl.get("status")
    wait_condition(cp, namespace, "Admitted", "True", reason="Admitted", name="second")


def _pair_pods(cp: ControlPlane, namespace: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cp.kubectl_json(
        "get", "pods", "-n", namespace, "-l", f"{ROLE_LABEL},app.kubernetes.io/instance={name}"
    )["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _pair_running(cp: ControlPlane, namespace: str, name: str) -> list[dict[str, Any]] | None:
    return _whole(_pair_pods(cp, namespace, name), 4)


def test_a_second_pair_waits_with_both_roles_named_and_starts_when_freed(queued: Queued) -> None:
    """Quota for one pair (two groups of 8 GPUs): the second pair's roles both wait, each group
    whole, with per-role Admitted; it runs once the first pair is deleted."""
    cp, namespace = queued.cp, queued.namespace
    queued.queue(2 * GROUP_GPUS)
    cp.apply(_pair("one", namespace))
    wait_for(lambda: _pair_running(cp, namespace, "one"), timeout=240, what="pair one Running")
    obj = wait_condition(cp, namespace, "Admitted", "True", name="one")
    assert {r["role"] for r in obj["status"]["roles"]} == {"prefill", "decode"}

    cp.apply(_pair("two", namespace))
    obj = wait_condition(
        cp,
        namespace,
        "Admitted",
        "False",
        reason="Pending",
        name="two",
        check=lambda o: all(
            condition({"status": r}, "Admitted").get("reason") == "Pending"
            for r in o["status"]["roles"]
        ),
        timeout=120,
    )
    message = condition(obj, "Admitted")["message"]
    assert "prefill: 0/1 replicas admitted" in message and "decode: 0/1" in message, message
    assert condition(obj, "Ready")["reason"] == "WaitingForQuota"
    pods = _pair_pods(cp, namespace, "two")
    assert pods and all(_gated(p) and not p["spec"].get("nodeName") for p in pods), [
        (p["metadata"]["name"], p["spec"].get("nodeName")) for p in pods
    ]

    cp.kubectl("delete", "dss", "one", "-n", namespace, "--wait=false")
    wait_for(lambda: _pair_running(cp, namespace, "two"), timeout=240, what="pair two Running")
    wait_condition(cp, namespace, "Admitted", "True", reason="Admitted", name="two")


def test_single_pod_replicas_are_admitted_one_by_one(queued: Queued) -> None:
    """A Deployment's pods are one Workload each (Kueue's pod integration): with quota for one
    of two TP4 replicas, one runs and the other waits behind the gate, and the status counts."""
    cp, namespace = queued.cp, queued.namespace
    queued.queue(4)
    doc = copy.deepcopy(SEED)
    doc["metadata"] = {"name": "single", "namespace": namespace}
    doc["spec"].pop("tolerations", None)
    doc["spec"].update(
        replicas=2,
        resources={"requests": {"cpu": "1", "memory": "1Gi"}},
        nodeSelector={"pool": namespace},
        queueName=QUEUE,
    )
    cp.apply(doc)
    selector = "app.kubernetes.io/instance=single"

    def one_running_one_gated() -> list[dict[str, Any]] | None:
        pods = cp.kubectl_json("get", "pods", "-n", namespace, "-l", selector)["items"]
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        gated = [p for p in pods if _gated(p) and not p["spec"].get("nodeName")]
        return pods if len(pods) == 2 and len(running) == 1 and len(gated) == 1 else None

    wait_for(one_running_one_gated, timeout=240, what="one replica Running, one gated")
    obj = wait_condition(
        cp,
        namespace,
        "Admitted",
        "False",
        reason="Pending",
        name="single",
        check=lambda o: (
            "1/2 replicas admitted" in condition(o, "Admitted").get("message", "")
            and condition(o, "Ready").get("message", "").startswith("1/2")
        ),
    )
    assert "nvidia.com/gpu" in condition(obj, "Admitted")["message"]
    ready = condition(obj, "Ready")
    assert ready["reason"] == "WaitingForQuota" and ready["message"].startswith("1/2"), ready


def test_the_operators_admission_check_admits_a_pair_whole(queued: Queued) -> None:
    """Quota for one pair and one more group, behind the operator's AdmissionCheck: the second
    pair gets quota for one role only, which Kueue reserves but does not admit (the check stays
    Pending), so no pod of either role starts; freed, both roles are admitted together."""
    cp, namespace = queued.cp, queued.namespace
    check = unique_name("pd-pair")
    cp.apply(admission_check(check))
    cq = queued.queue(3 * GROUP_GPUS)
    cp.kubectl(
        "patch", "clusterqueue", cq, "--type=merge",
        "-p", json.dumps({"spec": {"admissionChecksStrategy": {"admissionChecks": [{"name": check}]}}}),
    )  # fmt: skip
    try:
        wait_for(
            lambda: (
                _cond(cp.kubectl_json("get", "admissionchecks", check), "Active").get("status")
                == "True"
            ),
            timeout=60,
            what="the operator marks its AdmissionCheck Active",
        )
        cp.apply(_pair("one", namespace))
        wait_for(lambda: _pair_running(cp, namespace, "one"), timeout=240, what="pair one Running")

        cp.apply(_pair("two", namespace))

        def one_role_reserved() -> dict[str, dict[str, Any]] | None:
            found = {r: _workloads(cp, namespace, f"two-{r}") for r in ("prefill", "decode")}
            if any(len(w) != 1 for w in found.values()):
                return None
            by_role = {r: w[0] for r, w in found.items()}
            reserved = [
                r for r, w in by_role.items() if _cond(w, "QuotaReserved").get("status") == "True"
            ]
            return by_role if len(reserved) == 1 else None

        by_role = wait_for(one_role_reserved, timeout=120, what="one role of pair two reserved")
        for role, wl in by_role.items():
            assert _cond(wl, "Admitted").get("status") != "True", (role, wl["status"])
        pods = _pair_pods(cp, namespace, "two")
        assert pods and all(_gated(p) and not p["spec"].get("nodeName") for p in pods), [
            (p["metadata"]["name"], p["spec"].get("nodeName")) for p in pods
        ]

        def role_reasons() -> dict[str, Any]:
            obj = cp.kubectl_json("get", "dss", "two", "-n", namespace)
            return {
                r["role"]: condition({"status": r}, "Admitted").get("reason")
                for r in (obj.get("status") or {}).get("roles") or []
            }

        # The status follows Kueue's Workload events: wait for it to show both of them (an
        # earlier status may still say NoWorkloadYet for the role Kueue made a Workload for last).
        wait_for(
            lambda: sorted(role_reasons().values()) == ["Pending", "QuotaReserved"],
            timeout=180,
            what="pair two's Admitted per role: Pending and QuotaReserved",
        )

        cp.kubectl("delete", "dss", "one", "-n", namespace, "--wait=false")
        wait_for(lambda: _pair_running(cp, namespace, "two"), timeout=240, what="pair two Running")
        wait_condition(cp, namespace, "Admitted", "True", reason="Admitted", name="two")
        for role in ("prefill", "decode"):
            (wl,) = _workloads(cp, namespace, f"two-{role}")
            states = {c["name"]: c["state"] for c in wl["status"]["admissionChecks"]}
            assert states == {check: "Ready"}, states
    finally:
        cp.kubectl("delete", "admissioncheck", check, "--wait=false", check=False)


def test_a_preempted_serving_is_reported_and_comes_back_whole(queued: Queued) -> None:
    """Another team's higher-priority pod preempts the serving's group: the serving says
    Evicted in Kueue's words, none of its pods runs while it waits, and once that pod is gone
    the group is admitted again and runs whole."""
    cp, namespace = queued.cp, queued.namespace
    high = unique_name("high")
    cp.apply(workload_priority_class(high, 1000))
    queued.queue(GROUP_GPUS, preempt_lower=True)
    urgent = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "urgent",
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/queue-name": QUEUE, "kueue.x-k8s.io/priority-class": high},
        },
        "spec": {
            "nodeSelector": {"pool": namespace},
            "containers": [
                {
                    "name": "job",
                    "image": "registry.invalid/batch:1",
                    "resources": {"limits": {"nvidia.com/gpu": "4"}},
                }
            ],
        },
    }
    try:
        cp.apply(_serving("low", namespace))
        wait_for(lambda: _running(cp, namespace, "low"), timeout=240, what="low Running")
        wait_condition(cp, namespace, "Admitted", "True", reason="Admitted", name="low")

        cp.apply(urgent)
        obj = wait_condition(cp, namespace, "Admitted", "False", reason="Evicted", name="low")
        assert "Preempted" in condition(obj, "Admitted")["message"], condition(obj, "Admitted")
        assert condition(obj, "Ready")["status"] == "False"
        wait_for(
            lambda: all(_gated(p) for p in _pods(cp, namespace, "low")),
            timeout=120,
            what="no pod of the preempted group runs ungated",
        )
        wait_for(
            lambda: (
                (p := cp.kubectl_json("get", "pod", "urgent", "-n", namespace))
                and not _gated(p)
                and p["status"].get("phase") == "Running"
            ),
            timeout=120,
            what="the urgent pod admitted and running",
        )

        cp.kubectl("delete", "pod", "urgent", "-n", namespace, "--wait=false")
        back = wait_for(
            lambda: _running(cp, namespace, "low"), timeout=240, what="low Running whole again"
        )
        assert all(not _gated(p) and p["spec"].get("nodeName") for p in back)
        wait_condition(cp, namespace, "Admitted", "True", reason="Admitted", name="low")
    finally:
        cp.kubectl("delete", "pod", "urgent", "-n", namespace, "--ignore-not-found", check=False)
        cp.kubectl("delete", "workloadpriorityclass", high, "--ignore-not-found", check=False)
