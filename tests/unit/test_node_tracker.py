"""The node index (:mod:`deepseek_operator.nodes.tracker`): which Node events count as changes,
which DeepSeekServings a change may affect, and when the inventory is rebuilt."""

from __future__ import annotations

from deepseek_operator.nodes.facts import fingerprint, node_facts
from deepseek_operator.nodes.tracker import NodeTracker
from tests.unit.factories import agent_labels, node


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
