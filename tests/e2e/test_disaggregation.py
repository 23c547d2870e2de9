"""Prefill/decode disaggregation end to end: the operator, the real LWS controller, the real
scheduler, kwok GB200 trays in two NVL72 racks.

One prefill and one decode replica of DEP8 (two trays each): both roles placed, each group inside
one clique, the status per role; a decode backend edit rolls only the decode pods, a
kvCacheDtype edit (in the NIXL hash, shared) rolls both; an edit that makes the decode role
unrunnable holds the running pair (no pod replaced, no workload deleted) and says so in Ready.

Role rollouts stay apart: decode-only edits (batch shape, backend, a layout that takes decode
out of the prefill pods' NVLink cliques onto HGX B200 nodes) never change the prefill workload's
pod template or generation; a hashed edit rolls both. Names: a serving name that would take
another serving's role children is refused by the API server and by ``render`` alike, and a pair
one of whose names is taken (by a serving admitted before that rule) starts neither role.
"""

from __future__ import annotations

import copy
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from deepseek_operator.api.rules.values import NAME_ENDING_RULE
from tests.gpu_nodes import agent_labels, make_gpu_node
from tests.k8s.cluster import ControlPlane, unique_name, wait_for
from tests.k8s.conditions import wait_condition
from tests.k8s.dra import ComputeDomainDriver
from tests.k8s.operator import OperatorProcess, patch_serving
from tests.racks import GFD_CLIQUE, two_racks
from tests.servings import PD_GB200, serving

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


# --- role rollouts stay apart --------------------------------------------------------------


def _workload(cp: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    """The role's Deployment or LeaderWorkerSet named ``name``, or None."""
    for kind in ("deployments", "leaderworkersets"):
        items = cp.kubectl_json("get", kind, "-n", namespace)["items"]
        found = next((w for w in items if w["metadata"]["name"] == name), None)
        if found is not None:
            return dict(found)
    return None


def _pod_templates(workload: dict[str, Any]) -> Any:
    spec = workload["spec"]
    return spec.get("template") or spec.get("leaderWorkerTemplate")


def _settled(cp: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    """The serving once the operator has reconciled its latest generation."""
    obj = dict(cp.kubectl_json("get", "dss", name, "-n", namespace))
    done = (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]
    return obj if done else None


def _serving(namespace: str) -> dict[str, Any]:
    doc = serving(namespace, NAME, example=PD_GB200, small=False)
    doc["spec"]["disaggregation"]["roles"] = _roles()
    return doc


def _tp4_pair(namespace: str, name: str) -> dict[str, Any]:
    """The 1P1D example at TP4: one Deployment per role, one tray per pod."""
    doc = copy.deepcopy(EXAMPLE)
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"].pop("tolerations", None)
    doc["spec"]["nodeSelector"] = {"pool": namespace}
    for role in doc["spec"]["disaggregation"]["roles"]:
        role["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    return doc


def test_decode_only_edits_never_touch_the_prefill_workload_a_hashed_edit_rolls_both(
    lws_cluster: ControlPlane,
    operator: OperatorProcess,
    namespace: str,
    racks: list[Any],
    node_factory: Callable[..., list[Any]],
) -> None:
    cp = lws_cluster
    # Two HGX B200 nodes (8 GPUs, no NVLink clique): a TP8 decode pod fits only there.
    hgx = [
        make_gpu_node(
            unique_name("hgx-b200"),
            "NVIDIA-B200",
            agent_labels=agent_labels("NVIDIA-B200"),
            extra_labels={"pool": namespace},
        )
        for _ in range(2)
    ]
    node_factory(*hgx)
    name = "ro"
    doc = _tp4_pair(namespace, name)
    roles = doc["spec"]["disaggregation"]["roles"]
    cp.apply(doc)
    wait_condition(cp, namespace, "Ready", "True", name=name, timeout=240)
    prefill = _workload(cp, namespace, f"{name}-prefill")
    assert prefill is not None
    # The prefill pods prefer the NVLink clique of the decode pods.
    assert "podAffinity" in _pod_templates(prefill)["spec"]["affinity"]
    pods_before = {
        p["metadata"]["uid"]
        for p in cp.kubectl_json("get", "pods", "-n", namespace, "-l", f"{ROLE_LABEL}=prefill")[
            "items"
        ]
    }

    def decode_edit(role: dict[str, Any]) -> None:
        before = _workload(cp, namespace, f"{name}-decode")
        patch_serving(cp, namespace, {"spec": {"disaggregation": {"roles": roles}}}, name=name)
        wait_for(lambda: _settled(cp, namespace, name), timeout=120, what="edit reconciled")

        def decode_changed() -> bool:
            now = _workload(cp, namespace, f"{name}-decode")
            return now is not None and (
                before is None or _pod_templates(now) != _pod_templates(before)
            )

        wait_for(decode_changed, timeout=120, what="decode workload rewritten")
        now = _workload(cp, namespace, f"{name}-prefill")
        assert now is not None
        assert now["metadata"]["generation"] == prefill["metadata"]["generation"], role
        assert _pod_templates(now) == _pod_templates(prefill), role

    decode = roles[1]
    decode["engine"]["maxNumSeqs"] = 512  # batch shape
    decode_edit(decode)
    decode["moeBackend"] = "flashinfer_trtllm"  # backend
    decode_edit(decode)
    # Layout across cliques: TP8 fits only the HGX B200s, in no clique: no clique holds
    # eligible nodes of both roles any more, and the prefill pods keep their template.
    decode["moeBackend"] = "auto"
    decode["parallelism"] = {"tensorParallelSize": 8, "expertParallel": True}
    decode_edit(decode)
    obj = cp.kubectl_json("get", "dss", name, "-n", namespace)
    checks = {
        c["name"]: c
        for c in next(r for r in obj["status"]["roles"] if r["role"] == "prefill")["decision"][
            "checks"
        ]
    }
    assert checks["KVTransferPath"]["passed"] is False, checks["KVTransferPath"]
    decode_pods = wait_for(
        lambda: [
            p
            for p in cp.kubectl_json("get", "pods", "-n", namespace, "-l", f"{ROLE_LABEL}=decode")[
                "items"
            ]
            if p["status"].get("phase") == "Running"
            and p["spec"]["nodeName"] in {n["metadata"]["name"] for n in hgx}
        ],
        timeout=240,
        what="the TP8 decode pod Running on an HGX B200",
    )
    assert decode_pods
    pods_now = {
        p["metadata"]["uid"]
        for p in cp.kubectl_json("get", "pods", "-n", namespace, "-l", f"{ROLE_LABEL}=prefill")[
            "items"
        ]
    }
    assert pods_now == pods_before  # no prefill pod was replaced by any decode-only edit
    events = cp.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", "reason=RollingPools"
    )["items"]
    messages = [e["message"] for e in events if e["involvedObject"]["name"] == name]
    assert messages and all("the decode pool only" in m for m in messages), messages

    # A hashed (shared) edit still rolls both pools.
    patch_serving(cp, namespace, {"spec": {"engine": {"kvCacheDtype": "auto"}}}, name=name)
    wait_for(lambda: _settled(cp, namespace, name), timeout=120, what="hashed edit reconciled")

    def prefill_rolled() -> bool:
        now = _workload(cp, namespace, f"{name}-prefill")
        return now is not None and now["metadata"]["generation"] > prefill["metadata"]["generation"]

    wait_for(prefill_rolled, timeout=120, what="prefill workload rewritten")
    events = cp.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", "reason=RollingPools"
    )["items"]
    assert any("rolling both pools" in e["message"] for e in events), events


# --- names that cannot collide -------------------------------------------------------------


def _aggregated(namespace: str, name: str) -> dict[str, Any]:
    doc = yaml.safe_load((REPO / "examples/dsv41-flash-gb200.yaml").read_text())
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"].pop("tolerations", None)
    doc["spec"]["nodeSelector"] = {"pool": namespace}
    doc["spec"]["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    return doc


def test_a_name_that_would_take_a_role_child_is_refused_online_and_offline(
    lws_cluster: ControlPlane, crds: ControlPlane, namespace: str, tmp_path: pathlib.Path
) -> None:
    doc = _aggregated(namespace, "pd-prefill")
    server = lws_cluster.kubectl(
        "apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(doc), check=False
    )
    assert server.returncode != 0
    assert NAME_ENDING_RULE.message in server.stderr and "metadata.name" in server.stderr
    path = tmp_path / "pd-prefill.yaml"
    path.write_text(yaml.safe_dump(doc))
    offline = subprocess.run(
        [sys.executable, "-m", "deepseek_operator.cli", "render", "-f", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert offline.returncode == 1 and offline.stdout == ""
    lines = offline.stderr.splitlines()
    assert len(lines) == 1 and NAME_ENDING_RULE.message in lines[0], offline.stderr
    assert f"{path}: metadata.name: Invalid value" in lines[0]


CRD = "deepseekservings.serving.deepseek-operator.io"


def _replace_versions(cp: ControlPlane, versions: list[Any]) -> None:
    crd = dict(cp.kubectl_json("get", "crd", CRD))
    crd["spec"]["versions"] = versions
    crd.pop("status", None)
    crd["metadata"].pop("managedFields", None)
    cp.kubectl("replace", "-f", "-", input=yaml.safe_dump(crd))


def _without_ending_rule(cp: ControlPlane) -> list[Any]:
    """Our CRD as it was before the name-ending rule; returns its versions, to restore."""
    versions = cp.kubectl_json("get", "crd", CRD)["spec"]["versions"]
    old = copy.deepcopy(versions)
    for version in old:
        root = version["schema"]["openAPIV3Schema"]
        root["x-kubernetes-validations"] = [
            r for r in root["x-kubernetes-validations"] if not r.get("optionalOldSelf")
        ]
    _replace_versions(cp, old)
    return list(versions)


def test_a_pair_whose_name_is_taken_starts_neither_role(
    lws_cluster: ControlPlane, operator: OperatorProcess, namespace: str, racks: list[Any]
) -> None:
    cp = lws_cluster
    # A serving "tk-prefill" admitted before the ending rule existed (the rule is create-only,
    # so it keeps working): it owns Deployment "tk-prefill" and Service "tk-prefill-api".
    versions = _without_ending_rule(cp)
    legacy = yaml.safe_dump(_aggregated(namespace, "tk-prefill"))
    try:
        wait_for(
            lambda: cp.kubectl("apply", "-f", "-", input=legacy, check=False).returncode == 0,
            timeout=30,
            what="the legacy serving created",
        )
    finally:
        _replace_versions(cp, versions)
    # The new rule refuses the name again, and still lets the stored object be updated.
    refused = wait_for(
        lambda: (
            "must not end in"
            in (
                out := cp.kubectl(
                    "apply",
                    "--dry-run=server",
                    "-f",
                    "-",
                    input=yaml.safe_dump(_aggregated(namespace, "tk2-prefill")),
                    check=False,
                )
            ).stderr
            and out
        ),
        timeout=30,
        what="the ending rule back",
    )
    assert refused.returncode != 0
    patch_serving(cp, namespace, {"metadata": {"labels": {"team": "a"}}}, name="tk-prefill")
    wait_for(lambda: _workload(cp, namespace, "tk-prefill"), timeout=60, what="legacy workload")

    cp.apply(_tp4_pair(namespace, "tk"))
    held = wait_condition(
        cp,
        namespace,
        "WorkloadApplied",
        "False",
        reason="ForeignObjectInTheWay",
        name="tk",
        timeout=60,
    )
    conditions = {c["type"]: c for c in held["status"]["conditions"]}
    message = conditions["WorkloadApplied"]["message"]
    assert "Deployment/tk-prefill already exists and belongs to DeepSeekServing/tk-prefill" in (
        message
    )
    assert "the pair is held: neither role is written" in message
    assert conditions["Ready"]["status"] == "False"
    time.sleep(12)  # past the first backoff retry: still neither role
    assert _workload(cp, namespace, "tk-decode") is None
    theirs = _workload(cp, namespace, "tk-prefill")
    assert theirs is not None
    assert theirs["metadata"]["ownerReferences"][0]["name"] == "tk-prefill"

    # The legacy serving goes: the pair starts, both roles at once.
    cp.kubectl("delete", "dss", "tk-prefill", "-n", namespace, "--wait=true")

    def both_roles() -> bool:
        ours = [_workload(cp, namespace, f"tk-{role}") for role in ("prefill", "decode")]
        return all(
            w is not None and w["metadata"]["ownerReferences"][0]["name"] == "tk" for w in ours
        )

    wait_for(both_roles, timeout=240, what="both roles of the pair written")
