"""Prefill/decode disaggregation end to end: the operator, the real LWS controller, the real
scheduler, kwok GB200 trays in two NVL72 racks.

One prefill and one decode replica of DEP8 (two trays each): both roles placed, each group inside
one clique, the status per role; a decode backend edit rolls only the decode pods, a
kvCacheDtype edit (in the NIXL hash, shared) rolls both; an edit that makes the decode role
unrunnable holds the running pair (no pod replaced, no workload deleted) and says so in Ready.
"""

from __future__ import annotations

import copy
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.k8s.cluster import ControlPlane, unique_name, wait_for
from tests.k8s.conditions import wait_condition
from tests.k8s.dra import ComputeDomainDriver
from tests.k8s.operator import OperatorProcess, patch_serving
from tests.racks import GFD_CLIQUE, two_racks

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((REPO / "examples/dsv41-flash-1p1d-gb200.yaml").read_text())
NAME = "pd"
DEP8 = {
    "tensorParallelSize": 1,
    "dataParallelSize": 8,
    "dataParallelSizeLocal": 4,
    "expertParallel": True,
}
ROLE_LABEL = "serving.deepseek-operator.io/pd-role"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"

pytestmark = pytest.mark.e2e


def _roles(decode_backend: str = "auto") -> list[dict[str, Any]]:
    roles = copy.deepcopy(EXAMPLE["spec"]["disaggregation"]["roles"])
    for role in roles:
        role["parallelism"] = dict(DEP8)
        role["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    roles[1]["moeBackend"] = decode_backend
    return roles


def _serving(namespace: str) -> dict[str, Any]:
    doc = copy.deepcopy(EXAMPLE)
    doc["metadata"] = {"name": NAME, "namespace": namespace}
    doc["spec"].pop("tolerations", None)
    doc["spec"]["nodeSelector"] = {"pool": namespace}
    doc["spec"]["disaggregation"]["roles"] = _roles()
    return doc


@pytest.fixture
def racks(
    lws_cluster: ControlPlane,
    compute_domain_driver: ComputeDomainDriver,
    namespace: str,
    node_factory: Callable[..., list[Any]],
) -> list[Any]:
    """This test's two racks (pool=<namespace>), with the driver's ResourceSlices published."""
    nodes = two_racks(unique_name("pd"))
    for node in nodes:
        node["metadata"]["labels"]["pool"] = namespace
    created = node_factory(*nodes)
    compute_domain_driver.publish(created)
    return created


def _running(cp: ControlPlane, namespace: str) -> dict[str, list[dict[str, Any]]] | None:
    """The Running pods of each role, when both roles have all 2 x 2 of theirs."""
    pods = [
        p
        for p in cp.kubectl_json("get", "pods", "-n", namespace, "-l", ROLE_LABEL)["items"]
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]
    by_role = {
        role: [p for p in pods if p["metadata"]["labels"][ROLE_LABEL] == role]
        for role in ("prefill", "decode")
    }
    return by_role if all(len(v) == 2 for v in by_role.values()) and len(pods) == 4 else None


def _uids(by_role: dict[str, list[dict[str, Any]]]) -> dict[str, set[str]]:
    return {role: {p["metadata"]["uid"] for p in pods} for role, pods in by_role.items()}


def test_both_roles_placed_in_cliques_and_edits_roll_the_right_pools(
    lws_cluster: ControlPlane, operator: OperatorProcess, namespace: str, racks: list[Any]
) -> None:
    cp = lws_cluster
    cp.apply(_serving(namespace))
    by_role = wait_for(lambda: _running(cp, namespace), timeout=240, what="both roles Running")
    labels_of = {
        n["metadata"]["name"]: n["metadata"]["labels"]
        for n in cp.kubectl_json("get", "nodes")["items"]
    }
    for role, pods in by_role.items():
        # One LeaderWorkerSet per role; its one group inside one NVLink clique.
        assert {p["metadata"]["labels"][LWS_NAME_LABEL] for p in pods} == {f"{NAME}-{role}"}
        cliques = {labels_of[p["spec"]["nodeName"]].get(GFD_CLIQUE) for p in pods}
        assert len(cliques) == 1 and None not in cliques, (role, cliques)
        args = pods[0]["spec"]["containers"][0]["args"]
        kv_role = "kv_producer" if role == "prefill" else "kv_consumer"
        assert f'"kv_role":"{kv_role}"' in args[args.index("--kv-transfer-config") + 1]
        assert pods[0]["metadata"]["labels"]["llm-d.ai/role"] == role

    obj = wait_condition(cp, namespace, "Ready", "True", name=NAME)
    roles = {r["role"]: r for r in obj["status"]["roles"]}
    assert roles["prefill"]["resolved"]["moeBackend"] == "deep_gemm_mega_moe"
    assert roles["decode"]["readyReplicas"] == 1 and roles["prefill"]["readyReplicas"] == 1
    # Each role's LeaderWorkerSet group, as its pods show it (status.groups per role).
    for role, pods in by_role.items():
        (group,) = roles[role]["groups"]
        assert group["leaderPod"] == f"{NAME}-{role}-0"
        assert sorted(group["nodes"]) == sorted(p["spec"]["nodeName"] for p in pods)
        assert (group["podsReady"], group["podsTotal"]) == (2, 2) and group["clique"]
    before = _uids(by_role)

    # The decode backend is not in the NIXL hash and only the decode role's: decode rolls alone.
    patch_serving(
        cp,
        namespace,
        {"spec": {"disaggregation": {"roles": _roles("flashinfer_trtllm")}}},
        name=NAME,
    )

    def decode_rolled() -> dict[str, set[str]] | None:
        now = _running(cp, namespace)
        if now is None:
            return None
        uids = _uids(now)
        return uids if not (uids["decode"] & before["decode"]) else None

    after = wait_for(decode_rolled, timeout=240, what="decode pods replaced")
    assert after["prefill"] == before["prefill"]  # prefill untouched
    events = cp.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", "reason=RollingPools"
    )["items"]
    assert any("the decode pool only" in e["message"] for e in events), events

    # kvCacheDtype is in the NIXL hash, shared: both pools roll.
    patch_serving(cp, namespace, {"spec": {"engine": {"kvCacheDtype": "auto"}}}, name=NAME)

    def both_rolled() -> bool:
        now = _running(cp, namespace)
        if now is None:
            return False
        uids = _uids(now)
        return not (uids["decode"] & after["decode"]) and not (uids["prefill"] & after["prefill"])

    wait_for(both_rolled, timeout=300, what="both pools replaced")
    running = _uids(wait_for(lambda: _running(cp, namespace), timeout=120, what="pods Running"))

    # V4.1's specialized decode refuses KV transfer: the decode role cannot run. The live pair
    # is held as it is rather than deleted.
    roles = _roles("flashinfer_trtllm")
    roles[1]["engine"]["extraArgs"] = [
        "--additional-config",
        '{"decode_backend": "latency_specialized"}',
    ]
    patch_serving(cp, namespace, {"spec": {"disaggregation": {"roles": roles}}}, name=NAME)
    held = wait_condition(
        cp,
        namespace,
        "BackendResolved",
        "False",
        reason="KVTransferSpecializedDecodeFailed",
        name=NAME,
    )
    ready = next(c for c in held["status"]["conditions"] if c["type"] == "Ready")
    assert "the pair is held as it is" in ready["message"], ready
    workloads = cp.kubectl_json("get", "leaderworkersets", "-n", namespace)["items"]
    assert {w["metadata"]["name"] for w in workloads} == {f"{NAME}-prefill", f"{NAME}-decode"}
    still = _running(cp, namespace)
    assert still is not None and _uids(still) == running, (still, running)
