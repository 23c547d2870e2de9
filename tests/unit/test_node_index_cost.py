"""Regression: the work per Node event stays O(1) in the number of Nodes (counted, not timed).

A 10,000-Node cluster sends Node events all the time (heartbeats, label passes); start-up went
super-linear once because every event did work proportional to the cluster. These tests drive the
operator's real node path (:class:`OperatorState` → :class:`NodeTracker`) and count what it does:
Python calls per event (cProfile, deterministic), inventory rebuilds, and reconciles scheduled,
at two cluster sizes. Nothing here reads a clock.
"""

from __future__ import annotations

import cProfile
import pstats
from collections.abc import Callable
from typing import Any

import pytest

from deepseek_operator.controller.records import KeptBody
from deepseek_operator.controller.state import OperatorState
from deepseek_operator.nodes.facts import NodeFacts, facts_of
from tests.unit.factories import agent_labels, node

POOLS = 5
SERVINGS = 20  # DeepSeekServings, selecting pool i % POOLS


def gpu_node(i: int, **extra_labels: str) -> dict[str, Any]:
    """Node ``n<i>`` of pool ``p<i % POOLS>`` with healthy agent labels."""
    return node(f"n{i:05d}", labels={"pool": f"p{i % POOLS}", **extra_labels}, agent=agent_labels())


class Recorder(OperatorState):
    """The real operator state, with reconciles recorded instead of run."""

    def __init__(self) -> None:
        super().__init__()
        self.scheduled: list[tuple[str, str]] = []
        for i in range(SERVINGS):
            rec = self.records.ensure(("llm", f"dss-{i}"))
            rec.body = KeptBody.of({"spec": {"nodeSelector": {"pool": f"p{i % POOLS}"}}})

    def schedule(self, key: tuple[str, str], delay: float, trigger: str) -> None:
        self.scheduled.append(key)


def child(kind: str, name: str, owner: str, rv: int, namespace: str = "llm") -> dict[str, Any]:
    """A child object of ``owner`` as its watch delivers it."""
    return {
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": str(rv),
            "labels": {"app.kubernetes.io/instance": owner},
        },
    }


def listed(n: int) -> tuple[Recorder, dict[str, NodeFacts]]:
    """An operator state that has listed ``n`` Nodes, and their facts."""
    state = Recorder()
    snapshot = {f.name: f for f in (facts_of(gpu_node(i)) for i in range(n))}
    state.nodes_seen(snapshot)
    return state, snapshot


def calls_per_event(run: Callable[[], None], events: int) -> float:
    """Python function calls (cProfile's deterministic count) per event of ``run``."""
    profile = cProfile.Profile()
    profile.enable()
    run()
    profile.disable()
    return pstats.Stats(profile).total_calls / events  # type: ignore[attr-defined,no-any-return]


def node_events(state: Recorder, snapshot: dict[str, NodeFacts], events: int) -> Callable[[], None]:
    """``events`` Node events: alternately a heartbeat (same facts) and a label flip of one Node."""
    flipped = facts_of(gpu_node(0, rack="r9"))
    heartbeat = snapshot[flipped.name]

    def run() -> None:
        for i in range(events):
            state.node_seen(flipped.name, flipped if i % 4 == 1 else heartbeat)

    return run


def test_the_first_listing_schedules_nothing_and_builds_no_inventory() -> None:
    state, _ = listed(1000)
    assert len(state.nodes) == 1000
    assert state.scheduled == []  # resume reconciles every DeepSeekServing anyway
    assert state.nodes.inventory_builds == 0  # built when a reconcile first asks
    assert len(state.nodes.inventory()) == 1000
    assert state.nodes.inventory_builds == 1


@pytest.mark.parametrize("events", [400])
def test_python_calls_per_node_event_do_not_grow_with_the_cluster(events: int) -> None:
    small_state, small = listed(100)
    big_state, big = listed(3000)
    small_calls = calls_per_event(node_events(small_state, small, events), events)
    big_calls = calls_per_event(node_events(big_state, big, events), events)
    # 30x the Nodes, the same work per event (any per-event loop over Nodes multiplies it).
    assert big_calls == pytest.approx(small_calls, rel=0.02), (small_calls, big_calls)
    assert small_state.nodes.inventory_builds == big_state.nodes.inventory_builds == 0


def test_a_node_change_reschedules_only_the_servings_selecting_it_and_heartbeats_nothing() -> None:
    state, snapshot = listed(2000)
    state.nodes.inventory()
    heartbeat = snapshot["n00007"]
    for _ in range(50):
        state.node_seen("n00007", heartbeat)
    assert state.scheduled == []
    assert state.nodes.inventory_builds == 1  # heartbeats leave the inventory as it is
    state.node_seen("n00007", facts_of(gpu_node(7, rack="r1")))  # pool p2
    assert sorted(state.scheduled) == sorted(
        ("llm", f"dss-{i}") for i in range(SERVINGS) if i % POOLS == 7 % POOLS
    )
    state.nodes.inventory()
    state.nodes.inventory()
    assert state.nodes.inventory_builds == 2  # one rebuild per change, however often it is read


def test_a_node_selector_is_answered_from_the_label_index_exactly_as_a_full_scan() -> None:
    state, _ = listed(500)
    state.node_seen("n00003", facts_of(gpu_node(3, rack="r1")))
    inventory = state.nodes.inventory()
    for selector in ({}, {"pool": "p3"}, {"pool": "p3", "rack": "r1"}, {"rack": "r1"},
                     {"pool": "p9"}, {"absent": "x"}):  # fmt: skip
        scan = [
            n for n in inventory.nodes if all(n.labels.get(k) == v for k, v in selector.items())
        ]
        assert list(inventory.with_labels(selector)) == scan, selector
    assert set(inventory._by_label) == {"pool", "rack", "absent"}  # one index per key asked


def test_the_engine_runs_once_per_spec_and_inventory_and_again_after_a_node_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import yaml

    from deepseek_operator import plan as plan_module
    from deepseek_operator.api.load import parse_serving

    evaluations: list[str] = []
    real = plan_module.resolve

    def counting(spec: Any, inventory: Any, previous: Any, apis: Any = None, **kw: Any) -> Any:
        evaluations.append(spec.model.served_model_name)
        return real(spec, inventory, previous, apis, **kw)

    monkeypatch.setattr(plan_module, "resolve", counting)
    seed = yaml.safe_load(open("examples/dsv41-flash-gb200.yaml").read())  # noqa: SIM115
    seed["spec"].pop("tolerations", None)
    seed["spec"]["nodeSelector"] = {"pool": "p1"}
    first = parse_serving(seed)
    seed["spec"]["model"]["servedModelName"] = "other"
    second = parse_serving(seed)
    state, _ = listed(200)
    for _ in range(3):  # re-reconciles (child events) on an unchanged inventory
        for obj in (first, second):
            plan_module.plan(obj, state.nodes.inventory(), plan_module.Observed(), "now")
    assert len(evaluations) == 2  # one per distinct spec
    state.node_seen("n00001", facts_of(gpu_node(1, rack="r1")))
    plan_module.plan(first, state.nodes.inventory(), plan_module.Observed(), "now")
    assert len(evaluations) == 3  # a node change is a new inventory: decided afresh


# --- children: the same O(1) per event, from their own watches ----------------------------------


def children_listed(n: int) -> Recorder:
    """An operator state whose child watches listed a Deployment and a Service for each of
    ``n`` owners."""
    state = Recorder()
    for kind in ("Deployment", "Service"):
        snapshot = {f"llm/o{i}": child(kind, f"o{i}", f"o{i}", 10 + i) for i in range(n)}
        state.owned_listed(kind, None, f"{kind}-watch", snapshot)
    return state


@pytest.mark.parametrize("events", [400])
def test_python_calls_per_child_event_do_not_grow_with_the_fleet(events: int) -> None:
    def run(state: Recorder) -> Callable[[], None]:
        def go() -> None:
            for i in range(events):
                state.owned_seen(
                    "Deployment", "MODIFIED", "llm/o7", child("Deployment", "o7", "o7", 100 + i)
                )

        return go

    small, big = children_listed(100), children_listed(3000)
    small_calls = calls_per_event(run(small), events)
    big_calls = calls_per_event(run(big), events)
    assert big_calls == pytest.approx(small_calls, rel=0.02), (small_calls, big_calls)


def test_child_events_reach_only_their_owner_and_a_relisting_only_the_changed_ones() -> None:
    state = children_listed(50)
    assert state.scheduled == []  # the first listing: resume reconciles every owner anyway
    for i in range(50):
        state.records.ensure(("llm", f"o{i}")).body = KeptBody.of({"metadata": {"uid": f"u{i}"}})
    assert set(state.owned.children(("llm", "o3"))) == {
        ("Deployment", "o3"),
        ("Service", "o3"),
    }
    state.owned_seen("Service", "MODIFIED", "llm/o3", child("Service", "o3", "o3", 500))
    assert state.scheduled == [("llm", "o3")]
    state.scheduled.clear()
    state.owned_seen("Service", "DELETED", "llm/o4", child("Service", "o4", "o4", 501))
    assert state.scheduled == [("llm", "o4")]
    assert set(state.owned.children(("llm", "o4"))) == {("Deployment", "o4")}
    state.scheduled.clear()
    # A relabelled child leaves its old owner and joins the new one: both hear of it.
    state.owned_seen("Deployment", "MODIFIED", "llm/o5", child("Deployment", "o5", "o6", 502))
    assert sorted(state.scheduled) == [("llm", "o6")]
    assert ("Deployment", "o5") not in state.owned.children(("llm", "o5"))
    assert ("Deployment", "o5") in state.owned.children(("llm", "o6"))
    state.scheduled.clear()
    # The watch expired and listed again: one Deployment changed, one is gone.
    snapshot = {f"llm/o{i}": child("Deployment", f"o{i}", f"o{i}", 10 + i) for i in range(50)}
    snapshot["llm/o9"] = child("Deployment", "o9", "o9", 900)
    del snapshot["llm/o10"]
    del snapshot["llm/o5"]
    snapshot["llm/o5"] = child("Deployment", "o5", "o6", 502)
    state.owned_listed("Deployment", None, "Deployment-watch", snapshot)
    assert sorted(state.scheduled) == [("llm", "o10"), ("llm", "o9")]
