"""A replica over two pods on two nodes: a LeaderWorkerSet group that finds its leader by DNS.

The rack-scale example ``examples/dsv41-flash-dep8-nvl72.yaml`` (DEP8: dataParallelSize 8, 4 DP
ranks per GB200 tray, so each replica is one LeaderWorkerSet group of 2 pods) with one replica,
small CPU/memory requests and the vLLM stand-in image. The operator renders the LeaderWorkerSet;
the real LWS controller (installed by the README's recipe from its Helm chart) creates the group;
the scheduler puts the leader and the worker on the two trays of the clique (4 GPUs each). The
worker's four engines resolve ``LWS_LEADER_ADDRESS`` through CoreDNS (the leader pod's name in
LWS's headless Service) and connect to the leader's ``--data-parallel-rpc-port``; only then does
the leader's API server start, so the group, and the DeepSeekServing, turn Ready only once the
handshake crossed the nodes. Deleting the worker pod makes LWS recreate the whole group
(``RecreateGroupOnPodRestart``): a new leader pod, a new handshake, Ready again.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml

from tests.k8s.cluster import wait_for
from tests.kind.conftest import GB200_TRAYS, ROOT, STANDIN_IMAGE, KindCluster

pytestmark = pytest.mark.kind

NS = "llm"
NAME = "dsv41-dep8"
CLIQUE = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.32766"  # hack/kind-cluster.yaml's trays
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"


def serving() -> dict[str, Any]:
    """The rack-scale example, one replica, on the stand-in with requests a kind node can hold."""
    doc = yaml.safe_load((ROOT / "examples" / "dsv41-flash-dep8-nvl72.yaml").read_text())
    assert doc["metadata"]["name"] == NAME
    doc["spec"].update(
        replicas=1,
        image=STANDIN_IMAGE,
        resources={"requests": {"cpu": "100m", "memory": "128Mi"}},
    )
    return doc


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == ctype), {})


def group_pods(kc: KindCluster) -> dict[str, dict[str, Any]]:
    """The group's live pods by role (``head`` / ``worker``, the operator's role label)."""
    items = kc.kubectl_json("get", "pods", "-n", NS, "-l", f"{LWS_NAME_LABEL}={NAME}")["items"]
    live = [p for p in items if not p["metadata"].get("deletionTimestamp")]
    return {p["metadata"]["labels"]["serving.deepseek-operator.io/role"]: p for p in live}


def ready_serving(kc: KindCluster) -> dict[str, Any] | None:
    got = kc.kubectl("get", "dss", NAME, "-n", NS, "-o", "json", check=False)
    if got.returncode != 0:
        return None
    obj = yaml.safe_load(got.stdout)
    return obj if condition(obj, "Ready").get("status") == "True" else None


def check_handshake(kc: KindCluster, pods: dict[str, dict[str, Any]]) -> None:
    """The worker resolved the leader's name to the leader pod and its 4 engines said HELLO."""
    head, worker = pods["head"], pods["worker"]
    assert {head["spec"]["nodeName"], worker["spec"]["nodeName"]} == set(GB200_TRAYS), (
        head["spec"]["nodeName"],
        worker["spec"]["nodeName"],
    )
    env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0].get("env", [])}
    address = env["LWS_LEADER_ADDRESS"]
    # A DNS name in LWS's headless Service, not an IP: only cluster DNS can turn it into one.
    assert address.startswith(f"{NAME}-0.") and not address[0].isdigit(), address
    head_ip, worker_ip = head["status"]["podIP"], worker["status"]["podIP"]
    wlog = kc.kubectl("logs", worker["metadata"]["name"], "-n", NS).stdout
    assert f"data-parallel address {address} resolved to {head_ip}" in wlog, wlog
    for rank in range(4, 8):
        assert f"engine {rank} handshake with {address} ({head_ip}:13345) done" in wlog, wlog
    hlog = kc.kubectl("logs", head["metadata"]["name"], "-n", NS).stdout
    assert f"resolved to {head_ip}" in hlog, hlog
    for rank in range(4, 8):
        assert f"HELLO {rank} from {worker_ip}" in hlog, hlog
    assert "all 8 data-parallel engines up" in hlog, hlog


def test_a_group_over_two_trays_forms_through_cluster_dns_and_reforms(
    kind_cluster: KindCluster,
) -> None:
    kc = kind_cluster
    # The single-pod serving of the README's recipe holds a tray's GPUs (test_kind.py deletes it
    # at its end; again here, for a run of this file alone).
    kc.kubectl("delete", "dss", "dsv41", "-n", NS, "--ignore-not-found", "--wait=true", timeout=120)
    t0 = time.monotonic()
    kc.apply(serving())
    try:
        obj = wait_for(lambda: ready_serving(kc), timeout=300, interval=2, what="Ready=True")
    except BaseException:
        print(kc.kubectl("describe", "pods", "-n", NS, check=False).stdout[-5000:])
        raise
    formed_s = time.monotonic() - t0
    lws = kc.kubectl_json("get", "leaderworkerset", NAME, "-n", NS)
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    (group,) = obj["status"]["groups"]
    assert group["podsReady"] == 2 and group["clique"] == CLIQUE, group
    pods = group_pods(kc)
    assert sorted(group["nodes"]) == sorted(GB200_TRAYS), group
    check_handshake(kc, pods)

    # Delete the worker: LWS recreates the group (a new leader pod too) and it forms again.
    t1 = time.monotonic()
    old = {role: p["metadata"]["uid"] for role, p in pods.items()}
    kc.kubectl("delete", "pod", pods["worker"]["metadata"]["name"], "-n", NS, "--wait=false")

    def reformed() -> dict[str, dict[str, Any]] | None:
        now = group_pods(kc)
        if set(now) != {"head", "worker"} or not ready_serving(kc):
            return None
        if any(now[r]["metadata"]["uid"] == old[r] for r in old):
            return None
        return now

    new = wait_for(reformed, timeout=300, interval=2, what="the group recreated and Ready again")
    reformed_s = time.monotonic() - t1
    check_handshake(kc, new)
    print(f"LWS group over two trays: Ready after {formed_s:.1f} s; "
          f"re-formed {reformed_s:.1f} s after the worker pod was deleted")  # fmt: skip
    kc.kubectl("delete", "dss", NAME, "-n", NS, "--wait=true", timeout=120)
