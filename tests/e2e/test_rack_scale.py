"""Rack scale end to end: the operator, the real LWS controller, the real scheduler, kwok trays.

Two GB200 NVL72 racks of four kwok trays each (cliques with the same id under different cluster
UUIDs) plus a tray whose fabric has not completed, NVIDIA's ComputeDomain surface (CRD,
DeviceClasses, per-tray ResourceSlices) and the session operator (admin credentials).
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.k8s.cluster import ControlPlane, unique_name, wait_for
from tests.k8s.conditions import condition, serving_condition, wait_condition
from tests.k8s.dra import ComputeDomainDriver
from tests.k8s.lws import LwsInstall
from tests.k8s.operator import OperatorProcess, patch_serving
from tests.racks import GFD_CLIQUE, RACK_A, RACK_B, two_racks
from tests.servings import DEP8_NVL72, serving

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((REPO / "examples/dsv41-flash-dep8-nvl72.yaml").read_text())
NAME = EXAMPLE["metadata"]["name"]
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"

pytestmark = pytest.mark.e2e


@pytest.fixture
def racks(
    lws_cluster: ControlPlane,
    compute_domain_driver: ComputeDomainDriver,
    namespace: str,
    node_factory: Callable[..., list[Any]],
) -> list[Any]:
    """This test's two racks (pool=<namespace>), with the driver's ResourceSlices published."""
    nodes = two_racks(unique_name("nvl72"))
    for node in nodes:
        node["metadata"]["labels"]["pool"] = namespace
    created = node_factory(*nodes)
    compute_domain_driver.publish(created)
    return created


def _pods(cp: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cp.kubectl_json(
        "get", "pods", "-n", namespace, "-l", f"{LWS_NAME_LABEL}={NAME}"
    )["items"]
    return items


def _running(cp: ControlPlane, namespace: str, count: int) -> list[dict[str, Any]] | None:
    pods = [
        p
        for p in _pods(cp, namespace)
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]
    return pods if len(pods) == count else None


def _group_cliques(cp: ControlPlane, pods: list[dict[str, Any]]) -> dict[str, str]:
    labels_of = {
        n["metadata"]["name"]: n["metadata"]["labels"]
        for n in cp.kubectl_json("get", "nodes")["items"]
    }
    out: dict[str, str] = {}
    for group in sorted({p["metadata"]["labels"][GROUP_INDEX_LABEL] for p in pods}):
        members = [p for p in pods if p["metadata"]["labels"][GROUP_INDEX_LABEL] == group]
        cliques = {labels_of[p["spec"]["nodeName"]].get(GFD_CLIQUE) for p in members}
        assert len(cliques) == 1 and None not in cliques, f"group {group}: cliques {cliques}"
        out[group] = str(cliques.pop())
    return out


def _groups_from_pods(cp: ControlPlane, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """status.groups as the pods and Nodes show them (every pod Running and Ready)."""
    cliques = _group_cliques(cp, pods)
    out = []
    for group in sorted(cliques, key=int):
        members = sorted(
            (p for p in pods if p["metadata"]["labels"][GROUP_INDEX_LABEL] == group),
            key=lambda p: int(p["metadata"]["labels"].get(WORKER_INDEX_LABEL, "0")),
        )
        out.append(
            {
                "index": int(group),
                "leaderPod": members[0]["metadata"]["name"],
                "clique": cliques[group],
                "nodes": [p["spec"]["nodeName"] for p in members],
                "podsReady": len(members),
                "podsTotal": len(members),
            }
        )
    return out


def _status_groups(cp: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    status = cp.kubectl_json("get", "dss", NAME, "-n", namespace).get("status") or {}
    return list(status.get("groups") or [])


def test_dep8_groups_stay_in_one_clique_claim_imex_channels_and_the_fifth_pends(
    lws_cluster: ControlPlane, operator: OperatorProcess, namespace: str, racks: list[Any]
) -> None:
    cp = lws_cluster
    cp.apply(serving(namespace, NAME, example=DEP8_NVL72))

    pods = wait_for(lambda: _running(cp, namespace, 4), timeout=180, what="2 groups of 2 pods")
    cliques = _group_cliques(cp, pods)
    assert sorted(cliques.values()) == sorted([RACK_A.key, RACK_B.key])
    assert not any(p["spec"]["nodeName"].endswith("-pending") for p in pods)
    # Leader = DP head, worker = headless with its LWS index as node rank.
    leader = next(p for p in pods if p["metadata"]["name"] == f"{NAME}-0")
    worker = next(p for p in pods if p["metadata"]["name"] == f"{NAME}-0-1")
    assert "--headless" not in leader["spec"]["containers"][0]["args"]
    worker_args = worker["spec"]["containers"][0]["args"]
    assert worker_args[worker_args.index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
    env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}
    assert env["LWS_WORKER_INDEX"] == "1"  # LWS's webhook filled what the argv refers to

    # Every pod holds channel-0 of the tray it runs on, allocated by the real scheduler.
    claims = wait_for(
        lambda: (
            (
                c := [
                    c
                    for c in cp.kubectl_json("get", "resourceclaims", "-n", namespace)["items"]
                    if c.get("status", {}).get("allocation")
                ]
            )
            and len(c) == 4
            and c
        ),
        timeout=60,
        what="4 allocated IMEX channel claims",
    )
    node_of = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
    for claim in claims:
        pod = claim["status"]["reservedFor"][0]["name"]
        result = claim["status"]["allocation"]["devices"]["results"][0]
        assert (result["pool"], result["device"]) == (node_of[pod], "channel-0")
    domain = cp.kubectl_json("get", "computedomain", f"{NAME}-imex", "-n", namespace)
    assert domain["metadata"]["ownerReferences"][0]["kind"] == "DeepSeekServing"
    # One ComputeDomain per DeepSeekServing (docs/rack-scale.md, "ComputeDomain"): the two groups sit in two
    # cliques, and every pod's channel claim, in both, comes from that one domain.
    listed = cp.kubectl_json("get", "computedomains", "-n", namespace)["items"]
    assert [d["metadata"]["uid"] for d in listed] == [domain["metadata"]["uid"]]
    domains = {
        c["spec"]["devices"]["config"][0]["opaque"]["parameters"]["domainID"] for c in claims
    }
    assert domains == {domain["metadata"]["uid"]}
    cliques_of_claims = _group_cliques(
        cp, [p for p in pods if p["metadata"]["name"] in {c["status"]["reservedFor"][0]["name"]
                                                          for c in claims}]
    )  # fmt: skip
    assert sorted(cliques_of_claims.values()) == sorted([RACK_A.key, RACK_B.key])

    obj = wait_condition(cp, namespace, "Ready", "True", name=NAME)  # the LWS groups ready
    assert condition(obj, "ComputeDomain")["reason"] == "ComputeDomainRendered"
    status = cp.kubectl_json("get", "dss", NAME, "-n", namespace)["status"]
    assert status["resolved"]["podsPerReplica"] == 2 and status["readyReplicas"] == 2
    assert status["resolved"]["nvlinkCliques"] == [RACK_A.key, RACK_B.key]

    # status.groups (from the operator's pod watch) names the clique each group landed in and
    # the nodes its pods are on, exactly as the pods and Nodes show them.
    expected = _groups_from_pods(cp, _running(cp, namespace, 4) or [])
    groups = wait_for(
        lambda: (g := _status_groups(cp, namespace)) == expected and g,
        timeout=60,
        what=f"status.groups == {expected}",
    )
    assert {g["clique"] for g in groups} == {RACK_A.key, RACK_B.key}
    ready = serving_condition(cp, namespace, "Ready", NAME)["message"]
    for g in groups:
        assert f"{g['index']} in {g['clique']}: 2/2 pods ready" in ready, ready

    # Not exclusive: two more groups fit, two trays left in each clique.
    patch_serving(cp, namespace, {"spec": {"replicas": 4}}, name=NAME)
    pods = wait_for(lambda: _running(cp, namespace, 8), timeout=180, what="4 groups Running")
    assert sorted(_group_cliques(cp, pods).values()) == sorted([RACK_A.key, RACK_B.key] * 2)

    # Four trays per clique hold two groups each: a fifth replica cannot be placed.
    patch_serving(cp, namespace, {"spec": {"replicas": 5}}, name=NAME)
    obj = wait_condition(cp, namespace, "Placeable", "False", name=NAME)
    placeable = condition(obj, "Placeable")
    assert "capacity 4 replica(s), 5 wanted" in placeable["message"]
    assert RACK_A.key in placeable["message"] and RACK_B.key in placeable["message"]

    seen: dict[str, Any] = {}

    def fifth_unschedulable() -> bool:
        pod = cp.kubectl_json("get", "pod", f"{NAME}-4", "-n", namespace)
        seen["pod"] = {"spec.nodeName": pod["spec"].get("nodeName"), "status": pod["status"]}
        return not pod["spec"].get("nodeName") and any(
            c.get("reason") == "Unschedulable" for c in pod["status"].get("conditions", [])
        )

    try:
        wait_for(fifth_unschedulable, timeout=60, what="fifth group's leader Unschedulable")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen: {seen}") from None

    # Deleting the DeepSeekServing garbage-collects the LWS, the ComputeDomain and the claims.
    cp.kubectl("delete", "dss", NAME, "-n", namespace, "--wait=false")
    wait_for(
        lambda: not cp.kubectl_json("get", "leaderworkersets,computedomains,resourceclaims",
                                    "-n", namespace)["items"],
        timeout=120,
        what="LWS, ComputeDomain and claims garbage-collected",
    )  # fmt: skip


def test_a_lost_worker_recreates_its_group_and_a_spec_change_rolls_every_group(
    lws_cluster: ControlPlane, operator: OperatorProcess, namespace: str, racks: list[Any]
) -> None:
    cp = lws_cluster
    cp.apply(serving(namespace, NAME, example=DEP8_NVL72))
    pods = wait_for(lambda: _running(cp, namespace, 4), timeout=180, what="2 groups Running")
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
    lws_generation = cp.kubectl_json("get", "lws", NAME, "-n", namespace)["metadata"]["generation"]
    applies = operator.metric("deepseek_operator_child_applies_total", kind="LeaderWorkerSet")

    cp.kubectl("delete", "pod", f"{NAME}-1-1", "-n", namespace, "--wait=false")

    def group_one_recreated() -> bool:
        now = {
            p["metadata"]["name"]: p["metadata"]["uid"] for p in _running(cp, namespace, 4) or []
        }
        return (
            set(now) == set(uids)
            and now[f"{NAME}-1"] != uids[f"{NAME}-1"]  # the leader too: the whole group
            and now[f"{NAME}-1-1"] != uids[f"{NAME}-1-1"]
        )

    wait_for(group_one_recreated, timeout=120, what="group 1 recreated by LWS")
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in _pods(cp, namespace)}
    assert after[f"{NAME}-0"] == uids[f"{NAME}-0"] and after[f"{NAME}-0-1"] == uids[f"{NAME}-0-1"]
    # The operator did not fight LWS: no re-apply of the LeaderWorkerSet, same generation.
    assert cp.kubectl_json("get", "lws", NAME, "-n", namespace)["metadata"]["generation"] == (
        lws_generation
    )
    assert operator.metric("deepseek_operator_child_applies_total", kind="LeaderWorkerSet") == (
        applies
    )

    # Node churn (a label the decision does not read, on every tray) restarts nothing.
    reconciles = operator.metric("deepseek_operator_reconciles_total", trigger="nodes")
    before_churn = {p["metadata"]["name"]: p["metadata"]["uid"] for p in _pods(cp, namespace)}
    for node in racks:
        cp.kubectl("label", "node", node["metadata"]["name"], "churn=1", "--overwrite")
    wait_for(
        lambda: operator.metric("deepseek_operator_reconciles_total", trigger="nodes") > reconciles,
        timeout=60,
        what="a node-triggered reconcile",
    )
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in _pods(cp, namespace)} == (
        before_churn
    )

    # A spec change rolls every group (LWS's rolling update, one group at a time).
    patch_serving(cp, namespace, {"spec": {"engine": {"maxNumSeqs": 32}}}, name=NAME)

    def all_rolled() -> bool:
        pods = _running(cp, namespace, 4)
        return bool(pods) and all(
            "--max-num-seqs" in p["spec"]["containers"][0]["args"]
            and p["metadata"]["uid"] != before_churn.get(p["metadata"]["name"])
            for p in pods or []
        )

    wait_for(all_rolled, timeout=240, what="every group rolled to the new spec")


def test_without_the_lws_crd_a_multi_pod_spec_is_not_placeable_and_renders_nothing(
    lws_cluster: ControlPlane, operator: OperatorProcess, namespace: str, racks: list[Any]
) -> None:
    cp = lws_cluster
    install: LwsInstall = cp.extras["lws"]
    install.uninstall()
    try:
        cp.apply(serving(namespace, NAME, example=DEP8_NVL72))
        reason = "LeaderWorkerSetNotInstalled"
        obj = wait_condition(cp, namespace, "Placeable", reason=reason, name=NAME, timeout=90)
        placeable = condition(obj, "Placeable")
        assert placeable["status"] == "False"
        assert "helm install lws" in placeable["message"]
        assert not cp.kubectl_json("get", "deployments,services", "-n", namespace)["items"]
    finally:
        install.install()
    # Installing LWS afterwards is noticed (CRD watch): the workload appears.
    wait_for(lambda: _running(cp, namespace, 4), timeout=180, what="groups after LWS install")
    assert serving_condition(cp, namespace, "Placeable", NAME)["status"] == "True"


def test_pods_a_leaderworkerset_cannot_create_surface_as_pods_refused(
    lws_cluster: ControlPlane, operator: OperatorProcess, namespace: str, racks: list[Any]
) -> None:
    # vLLM images run as root and multi-pod replicas add IPC_LOCK: "restricted" refuses the
    # leader pods. The LeaderWorkerSet stays "Progressing"; only its StatefulSet's FailedCreate
    # Event says why, and the DeepSeekServing must say it too.
    cp = lws_cluster
    cp.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    cp.apply(serving(namespace, NAME, example=DEP8_NVL72))

    obj = wait_condition(cp, namespace, "Ready", reason="PodsRefused", name=NAME, timeout=120)
    cond = condition(obj, "Ready")
    assert cond["status"] == "False"
    message = cond["message"]
    assert f"StatefulSet/{NAME}: FailedCreate: " in message, message
    assert 'violates PodSecurity "restricted:latest"' in message, message
    lws = cp.kubectl_json("get", "leaderworkersets", NAME, "-n", namespace)
    assert not any(
        c.get("status") == "True" and "fail" in c.get("reason", "").lower()
        for c in (lws.get("status") or {}).get("conditions", [])
    ), "LWS itself says nothing about the refusal"
    assert serving_condition(cp, namespace, "WorkloadApplied", NAME).get("status") != "False"


def test_a_statefulset_the_leaderworkerset_cannot_create_surfaces_as_pods_refused(
    lws_cluster: ControlPlane, operator: OperatorProcess, namespace: str, racks: list[Any]
) -> None:
    # A quota of zero StatefulSets: the LWS controller cannot create its leader StatefulSet.
    # It records that only as a FailedCreate Event on the LeaderWorkerSet (no StatefulSet, no
    # pod, nothing in its status); the DeepSeekServing must say it, in the controller's words.
    cp = lws_cluster
    cp.apply(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "no-statefulsets", "namespace": namespace},
            "spec": {"hard": {"count/statefulsets.apps": "0"}},
        }
    )
    cp.apply(serving(namespace, NAME, example=DEP8_NVL72))

    obj = wait_condition(cp, namespace, "Ready", reason="PodsRefused", name=NAME, timeout=120)
    cond = condition(obj, "Ready")
    assert cond["status"] == "False"
    message = cond["message"]
    assert (
        f"LeaderWorkerSet/{NAME}: FailedCreate: Failed to create leader statefulset {NAME}: "
        in (message)
    ), message
    assert "exceeded quota: no-statefulsets" in message, message
    assert not cp.kubectl_json("get", "statefulsets", "-n", namespace)["items"]
    assert serving_condition(cp, namespace, "WorkloadApplied", NAME).get("status") != "False"

    # The quota lifted: the LWS controller creates its StatefulSets and the reason goes away.
    cp.kubectl("delete", "resourcequota", "no-statefulsets", "-n", namespace)
    wait_for(
        lambda: serving_condition(cp, namespace, "Ready", NAME).get("reason") != "PodsRefused",
        timeout=180,
        what="PodsRefused cleared once the StatefulSets exist",
    )
