"""status.groups: our LWS pods → group index → clique, nodes and readiness (pure core + the
pod watch's record keeping, no API server)."""

from __future__ import annotations

from typing import Any

from deepseek_operator import names
from deepseek_operator.controller.pod_watch import POD_SELECTOR, PodGroups, pod_record
from deepseek_operator.plan import Observed, PodSeen, plan
from deepseek_operator.render.status import status_dict
from tests.racks import RACK_A, RACK_B
from tests.unit.test_rack_scale import _obj, _racks


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


def test_pod_groups_report_only_owners_whose_groups_changed() -> None:
    groups = PodGroups()
    key = ("llm", "dsv4-0")
    first = pod_record(_pod("dsv4-0", 0, 0, "a0"))
    assert groups.observe(key, first) == {("llm", "dsv4")}
    assert groups.observe(key, first) == set()  # the same facts: no reconcile
    assert groups.observe(key, pod_record(_pod("dsv4-0", 0, 0, "a0", ready=True)))
    assert groups.groups(("llm", "dsv4")) == {0: {0: PodSeen("dsv4-0", "a0", True)}}
    # A listing without the pod removes it; other namespaces are untouched.
    other = ("other", "p")
    groups.observe(other, pod_record({**_pod("p", 0, 0), "metadata": {
        **_pod("p", 0, 0)["metadata"], "namespace": "other"}}))  # fmt: skip
    assert groups.replace("llm", {}) == {("llm", "dsv4")}
    assert groups.groups(("llm", "dsv4")) == {} and len(groups) == 1


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
