"""Narrow unit tests of two controller parts: the discovery-backed resource table and the node tracker.

The real API server paths are exercised by tests/integration and tests/e2e; these pin down that a
new kind needs no hand-written path and which Node events count as changes.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.factories import agent_labels, node

from deepseek_operator.controller.kube import KubeClient, KubeError
from deepseek_operator.controller.node_tracker import NodeTracker, fingerprint
from deepseek_operator.nodes.facts import node_facts

LWS_DISCOVERY = {
    "kind": "APIResourceList",
    "groupVersion": "leaderworkerset.x-k8s.io/v1",
    "resources": [
        {"name": "leaderworkersets", "kind": "LeaderWorkerSet", "namespaced": True},
        {"name": "leaderworkersets/status", "kind": "LeaderWorkerSet", "namespaced": True},
    ],
}


class DiscoveryOnly(KubeClient):
    """A KubeClient whose API server answers discovery requests only, and counts them."""

    def __init__(self, listings: dict[str, Any]) -> None:
        super().__init__()
        self.listings = listings
        self.requests: list[tuple[str, str]] = []

    def _call(self, method: str, path: str, body: Any, content_type: str, query: Any = None) -> Any:
        self.requests.append((method, path))
        return self.listings.get(path, {"resources": []})


def test_a_new_kind_is_written_through_discovery_without_a_hand_written_path() -> None:
    kube = DiscoveryOnly({"/apis/leaderworkerset.x-k8s.io/v1": LWS_DISCOVERY})
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "dsv41", "namespace": "llm"},
    }
    assert kube.object_path(lws) == "/apis/leaderworkerset.x-k8s.io/v1/namespaces/llm/leaderworkersets/dsv41"  # fmt: skip
    kube.object_path(lws)
    assert kube.requests == [("GET", "/apis/leaderworkerset.x-k8s.io/v1")]  # cached after one GET


def test_core_group_and_unknown_kinds() -> None:
    core = {"resources": [{"name": "services", "kind": "Service", "namespaced": True}]}
    kube = DiscoveryOnly({"/api/v1": core})
    assert kube.resource("v1", "Service").path("llm", "a") == "/api/v1/namespaces/llm/services/a"
    with pytest.raises(KubeError, match="ComputeDomain"):
        kube.resource("v1", "ComputeDomain")


def test_node_tracker_reports_only_changes_the_decision_reads() -> None:
    tracker = NodeTracker()
    healthy = fingerprint(node_facts(node("gb0", agent=agent_labels())))
    first = tracker.observe("gb0", healthy)
    assert first is not None and first.before is None and first.after == healthy
    # A GFD pass rewrites its timestamp label only: not a change.
    heartbeat = node("gb0", agent=agent_labels(), labels={"nvidia.com/gfd.timestamp": "1"})
    assert tracker.observe("gb0", fingerprint(node_facts(heartbeat))) is None
    broken = fingerprint(node_facts(node("gb0", agent=agent_labels(fully_connected="false"))))
    change = tracker.observe("gb0", broken)
    assert change is not None and change.before == healthy and change.after == broken
    gone = tracker.observe("gb0", None)
    assert gone is not None and gone.after is None and len(tracker) == 0


def test_node_change_affects_servings_whose_selector_matched_before_or_after() -> None:
    tracker = NodeTracker()
    before = fingerprint(node_facts(node("gb0", labels={"pool": "a"})))
    after = fingerprint(node_facts(node("gb0", labels={"pool": "b"})))
    tracker.observe("gb0", before)
    change = tracker.observe("gb0", after)
    assert change is not None
    assert change.may_affect({"pool": "a"}) and change.may_affect({"pool": "b"})
    assert not change.may_affect({"pool": "c"})


def test_inventory_is_rebuilt_after_a_change_only() -> None:
    tracker = NodeTracker()
    facts = fingerprint(node_facts(node("gb0", agent=agent_labels())))
    tracker.observe("gb0", facts)
    first = tracker.inventory()
    assert tracker.inventory() is first
    changed = fingerprint(node_facts(node("gb0", agent=agent_labels(fully_connected="false"))))
    tracker.observe("gb0", changed)
    assert tracker.inventory().nodes == (changed,)
    assert tracker.inventory_builds == 2


def test_a_relisting_reports_nodes_added_changed_and_gone() -> None:
    tracker = NodeTracker()
    a = fingerprint(node_facts(node("a", labels={"pool": "x"})))
    b = fingerprint(node_facts(node("b", labels={"pool": "x"})))
    assert {c.after.name for c in tracker.replace_all({"a": a, "b": b}) if c.after} == {"a", "b"}
    b2 = fingerprint(node_facts(node("b", labels={"pool": "y"})))
    c = fingerprint(node_facts(node("c", labels={"pool": "y"})))
    changes = tracker.replace_all({"b": b2, "c": c})
    assert sorted((ch.before.name if ch.before else "", ch.after.name if ch.after else "")
                  for ch in changes) == [("", "c"), ("a", ""), ("b", "b")]  # fmt: skip
    assert tracker.replace_all({"b": b2, "c": c}) == []
    assert [n.name for n in tracker.inventory().nodes] == ["b", "c"]


def test_indexes_keep_bodies_without_managed_fields() -> None:
    from deepseek_operator.controller.handlers import _kept

    body = {
        "kind": "Deployment",
        "metadata": {"name": "a", "resourceVersion": "7", "managedFields": [{"manager": "x"}]},
        "spec": {"replicas": 1},
    }
    kept = _kept(body)  # type: ignore[arg-type]
    assert kept == {"kind": "Deployment", "metadata": {"name": "a", "resourceVersion": "7"},
                    "spec": {"replicas": 1}}  # fmt: skip
    assert body["metadata"]["managedFields"] == [{"manager": "x"}]  # the event's body is untouched


class _Discovery:
    """A KubeClient stand-in answering ``served`` from a set, counting discovery rounds."""

    def __init__(self, served: set[str]) -> None:
        self.served_kinds = served
        self.asked = 0

    def forget_resources(self) -> None:
        pass

    def served(self, api_version: str, kind: str) -> bool:
        self.asked += 1
        return kind in self.served_kinds


def test_addon_crd_events_decide_what_is_served_before_discovery_catches_up() -> None:
    from deepseek_operator.controller.handlers import LWS_CRD, ClusterApiProbe

    kube = _Discovery(set())  # discovery has not listed the new group yet
    probe = ClusterApiProbe(kube, compute_domain_enabled=True)  # type: ignore[arg-type]
    assert probe.current().leader_worker_set is False
    established = {"status": {"conditions": [{"type": "Established", "status": "True"}]}}
    probe.crd_seen(LWS_CRD, {"status": {"conditions": []}})
    assert probe.current().leader_worker_set is False  # created, not yet established
    probe.crd_seen(LWS_CRD, established)
    assert probe.current().leader_worker_set is True  # the event wins over stale discovery
    probe.crd_seen(LWS_CRD, None)
    assert probe.current().leader_worker_set is False
    assert kube.asked == 2  # one discovery round (two kinds), cached since
