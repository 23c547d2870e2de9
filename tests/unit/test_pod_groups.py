"""status.groups: our LWS pods → group index → clique, nodes and readiness (pure core + the
pod watch's record keeping, no API server)."""

from __future__ import annotations

import pathlib
from typing import Any

import yaml

from deepseek_operator import names
from deepseek_operator.actions.children import pod_groups, pod_record
from deepseek_operator.actions.owned import POD, OwnedIndex
from deepseek_operator.api.load import parse_serving
from deepseek_operator.controller.watches import POD_SELECTOR
from deepseek_operator.nodes.facts import build_inventory
from deepseek_operator.plan import Observed, PodSeen, plan
from deepseek_operator.render.status import status_dict
from tests.racks import RACK_A, RACK_B
from tests.unit.test_rack_scale import _obj, _racks

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _pod(name: str, group: int, worker: int, node: str = "", ready: bool = False) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "llm",
            "labels": {
                names.LABEL_INSTANCE: "dsv4",
                names.LABEL_MANAGED_BY: names.MANAGED_BY,
                names.LWS_NAME_LABEL: "dsv4",
                names.LWS_GROUP_INDEX_LABEL: str(group),
                names.LWS_WORKER_INDEX_LABEL: str(worker),
            },
        },
        "spec": {"nodeName": node} if node else {},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_pod_record_keeps_owner_indexes_node_and_readiness_only() -> None:
    record = pod_record(_pod("dsv4-1-1", 1, 1, "a1", ready=True))
    assert record is not None
    assert (record.owner, record.group, record.worker) == (("llm", "dsv4"), 1, 1)
    assert record.seen == PodSeen("dsv4-1-1", "a1", True)
    terminating = _pod("dsv4-0", 0, 0, "a0", ready=True)
    terminating["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    assert pod_record(terminating).seen.ready is False  # type: ignore[union-attr]
    unlabelled = _pod("x", 0, 0)
    del unlabelled["metadata"]["labels"][names.LWS_GROUP_INDEX_LABEL]
    assert pod_record(unlabelled) is None
    # The watch asks the API server for our LWS pods only.
    assert (
        POD_SELECTOR
        == "app.kubernetes.io/managed-by=deepseek-operator,leaderworkerset.sigs.k8s.io/name"
    )


def test_pod_entries_report_only_owners_whose_groups_changed() -> None:
    index = OwnedIndex()
    key = (POD, "llm/dsv4-0")
    first = pod_record(_pod("dsv4-0", 0, 0, "a0"))
    owner = ("llm", "dsv4")
    assert index.put(key, owner, first) == {owner}
    assert index.put(key, owner, first) == set()  # the same facts: no reconcile
    assert index.put(key, owner, pod_record(_pod("dsv4-0", 0, 0, "a0", ready=True)))
    assert pod_groups(index.of_kind(owner, POD).values()) == {
        "": {0: {0: PodSeen("dsv4-0", "a0", True)}}
    }
    # A listing without the pod removes it; other namespaces are untouched.
    other = pod_record({**_pod("p", 0, 0), "metadata": {
        **_pod("p", 0, 0)["metadata"], "namespace": "other"}})  # fmt: skip
    index.put((POD, "other/p"), ("other", "dsv4"), other)
    assert index.replace(lambda k: k[1].startswith("llm/"), {}) == {owner}
    assert index.of_kind(owner, POD) == {} and len(index) == 1


def test_status_names_each_groups_clique_nodes_and_ready_pods() -> None:
    obj = _obj()
    inv = _racks()
    seen = {
        0: {0: PodSeen("dsv4-0", "a0", True), 1: PodSeen("dsv4-0-1", "a1", True)},
        1: {0: PodSeen("dsv4-1", "b0", True), 1: PodSeen("dsv4-1-1", "", False)},
    }
    status = status_dict(plan(obj, inv, Observed(groups=seen), "t").status)
    assert status["groups"] == [
        {"index": 0, "leaderPod": "dsv4-0", "clique": RACK_A.key, "nodes": ["a0", "a1"],
         "podsReady": 2, "podsTotal": 2},
        {"index": 1, "leaderPod": "dsv4-1", "clique": RACK_B.key, "nodes": ["b0", ""],
         "podsReady": 1, "podsTotal": 2},
    ]  # fmt: skip
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (
        f"groups: 0 in {RACK_A.key}: 2/2 pods ready; 1 in {RACK_B.key}: 1/2 pods ready"
        in (ready["message"])
    )
    # A group straddling two cliques would show both; the offline preview shows no groups.
    straddling = {0: {0: PodSeen("dsv4-0", "a0", True), 1: PodSeen("dsv4-0-1", "b1", False)}}
    group = status_dict(plan(obj, inv, Observed(groups=straddling), "t").status)["groups"][0]
    assert group["clique"] == ", ".join(sorted([RACK_A.key, RACK_B.key]))
    assert "groups" not in status_dict(plan(obj, inv, Observed.offline(), "t").status)


def _role_pod(role: str, group: int, worker: int, node: str) -> dict[str, Any]:
    pod = _pod(f"dsv4-{role}-{group}" + (f"-{worker}" if worker else ""), group, worker, node)
    pod["metadata"]["labels"] |= {
        names.LABEL_PD_ROLE: role,
        names.LWS_NAME_LABEL: f"dsv4-{role}",
    }
    return pod


def test_the_roles_of_a_disaggregated_serving_keep_their_groups_apart() -> None:
    # Each role's LeaderWorkerSet numbers its groups from 0: group 0 of prefill is not decode's.
    records = [pod_record(_role_pod(r, 0, 0, n)) for r, n in (("prefill", "t0"), ("decode", "t2"))]
    groups = pod_groups(r for r in records if r is not None)
    assert "" not in groups  # no aggregated pods
    assert groups == {
        "decode": {0: {0: PodSeen("dsv4-decode-0", "t2", False)}},
        "prefill": {0: {0: PodSeen("dsv4-prefill-0", "t0", False)}},
    }


def test_a_disaggregated_serving_reports_each_roles_groups() -> None:
    raw = yaml.safe_load((ROOT / "examples/dsv4-pro-3p2d-nvl72.yaml").read_text())
    items = yaml.safe_load((ROOT / "examples/nodes-gb200-nvl72.yaml").read_text())["items"]
    obj, inv = parse_serving(raw), build_inventory(items)
    trays = [f"nvl72-tray-{i:02d}" for i in range(6)]
    seen = {
        "prefill": {
            g: {w: PodSeen(f"dsv4-pro-prefill-{g}-{w}", trays[2 * g + w], True) for w in (0, 1)}
            for g in range(3)
        },
        "decode": {0: {w: PodSeen(f"dsv4-pro-decode-0-{w}", "", False) for w in range(4)}},
    }
    status = status_dict(plan(obj, inv, Observed(role_groups=seen), "t").status)
    roles = {r["role"]: r for r in status["roles"]}
    prefill, decode = roles["prefill"]["groups"], roles["decode"]["groups"]
    assert [(g["index"], g["nodes"], g["podsReady"], g["podsTotal"]) for g in prefill] == [
        (g, trays[2 * g : 2 * g + 2], 2, 2) for g in range(3)
    ]
    assert [(g["index"], g["podsReady"], g["podsTotal"]) for g in decode] == [(0, 0, 4)]
    assert all(g["clique"] for g in prefill)
    assert "groups" not in status  # per role, not summed up
