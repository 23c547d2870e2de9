"""The pure reconcile planner (``deepseek_operator.actions``): no kopf, no API, no clock."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from deepseek_operator import actions
from deepseek_operator.actions import (
    Apply,
    CheckOwner,
    Decided,
    Delete,
    FollowUp,
    PatchStatus,
    PostEvent,
    after_write_actions,
    backoff_delay,
    decision_actions,
    follow_ups,
    invalid_spec_actions,
    next_failures,
    split_children,
    write_actions,
)
from deepseek_operator.api.load import parse_serving
from deepseek_operator.engine.cluster_apis import ClusterApis
from deepseek_operator.names import EVENT_FOREIGN_OBJECT, EVENT_WORKLOAD_REFUSED, WORKLOAD_APPLIED
from deepseek_operator.plan import Observed, plan
from tests.unit.factories import gb200_pool

SEED = yaml.safe_load(open("examples/dsv41-flash-gb200.yaml").read())  # noqa: SIM115
NOW = "2026-01-01T00:00:00Z"


def _planned() -> Any:
    body = copy.deepcopy(SEED)
    body["metadata"] = {"name": "a", "namespace": "llm", "generation": 1, "uid": "uid-a"}
    return parse_serving(body), body


def _ours(manifest: dict[str, Any], uid: str = "uid-a") -> dict[str, Any]:
    live = copy.deepcopy(manifest)
    if uid != "uid-a" or "ownerReferences" not in live["metadata"]:  # the plan's own are ours
        live["metadata"]["ownerReferences"] = [{"controller": True, "uid": uid, "kind": "X"}]
    live["metadata"]["resourceVersion"] = "7"
    return live


def test_a_first_reconcile_patches_the_status_then_creates_every_child() -> None:
    obj, _ = _planned()
    planned = plan(obj, gb200_pool(), Observed(), NOW, ClusterApis())
    writes = write_actions(planned.objects, {}, {}, planned.status_dict, {}, owner_name="a")
    assert isinstance(writes.actions[0], PatchStatus)
    assert [a.child for a in writes.applies] == [
        (o["kind"], o["metadata"]["name"]) for o in planned.objects
    ]
    assert all(a.unseen for a in writes.applies) and not writes.deletes


def test_nothing_changed_means_no_action_and_a_hand_edit_is_restored() -> None:
    obj, _ = _planned()
    planned = plan(obj, gb200_pool(), Observed(), NOW, ClusterApis())
    ours = {(o["kind"], o["metadata"]["name"]): _ours(o) for o in planned.objects}
    status = planned.status_dict
    assert write_actions(planned.objects, ours, {}, status, status, owner_name="a").actions == []
    edited = copy.deepcopy(ours)
    first = next(iter(edited))
    edited[first]["metadata"]["labels"] = {}
    writes = write_actions(planned.objects, edited, {}, status, status, owner_name="a")
    # the status is unchanged: the owner is proved alive before the write
    assert writes.actions[0] == CheckOwner()
    assert [(a.child, a.unseen) for a in writes.applies] == [(first, False)]


def test_a_child_the_plan_dropped_is_deleted_and_a_strangers_one_never() -> None:
    obj, _ = _planned()
    planned = plan(obj, gb200_pool(), Observed(), NOW, ClusterApis())
    ours = {(o["kind"], o["metadata"]["name"]): _ours(o) for o in planned.objects}
    old = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "old"}}
    ours[("Deployment", "old")] = _ours(old)
    stranger = _ours(old, uid="someone-else")
    live = {**ours, ("Deployment", "x"): stranger}
    mine, strangers = split_children(live, "uid-a")
    assert ("Deployment", "x") in strangers and ("Deployment", "x") not in mine
    status = planned.status_dict
    writes = write_actions(planned.objects, mine, strangers, status, status, owner_name="a")
    assert writes.deletes == [Delete("apps/v1", "Deployment", "old")]
    assert writes.applies == []


def test_a_stranger_in_the_way_is_reported_not_written() -> None:
    obj, _ = _planned()
    planned = plan(obj, gb200_pool(), Observed(), NOW, ClusterApis())
    manifest = planned.objects[0]
    key = (manifest["kind"], manifest["metadata"]["name"])
    strangers = {key: _ours(manifest, uid="other")}
    writes = write_actions(planned.objects, {}, strangers, {}, {}, owner_name="a")
    assert key not in [a.child for a in writes.applies]
    assert writes.foreign and "already exists and belongs to X/" in writes.foreign[0]


def test_a_status_only_reconcile_writes_no_child() -> None:
    obj, _ = _planned()
    planned = plan(obj, gb200_pool(), Observed(), NOW, ClusterApis())
    writes = write_actions(
        planned.objects, {}, {}, planned.status_dict, {}, owner_name="a", status_only=True
    )
    assert writes.actions == [PatchStatus(planned.status_dict)]
    assert after_write_actions({}, ["Deployment/a: no"], [], generation=1, now=NOW,
                               status_only=True) == []  # fmt: skip


def test_a_refusal_sets_workload_applied_once_with_one_event() -> None:
    refused = ["Deployment/a: forbidden"]
    first = after_write_actions({}, refused, [], generation=1, now=NOW)
    assert isinstance(first[0], PatchStatus)
    blocked = first[0].status
    assert [c["status"] for c in blocked["conditions"] if c["type"] == WORKLOAD_APPLIED] == [
        "False"
    ]
    assert [a.reason for a in first if isinstance(a, PostEvent)] == [EVENT_WORKLOAD_REFUSED]
    # the retry, refused alike: nothing new to write nor to tell
    assert after_write_actions(blocked, refused, [], generation=1, now=NOW) == []
    # written at last: the condition flips, no Warning
    healed = after_write_actions(blocked, [], [], generation=1, now=NOW)
    assert [type(a) for a in healed] == [PatchStatus]
    foreign = after_write_actions({}, [], ["Service/a-api: taken"], generation=1, now=NOW)
    assert [a.reason for a in foreign if isinstance(a, PostEvent)] == [EVENT_FOREIGN_OBJECT]
    assert after_write_actions({}, [], [], generation=1, now=NOW) == []


def test_the_decision_event_is_posted_when_the_decision_changes_only() -> None:
    obj, _ = _planned()
    planned = plan(obj, gb200_pool(), Observed(), NOW, ClusterApis())
    res = planned.resolution
    first = decision_actions(Observed(), res)
    assert first[0] == Decided(res.moe_backend, res.reason)
    assert isinstance(first[1], PostEvent) and first[1].message.startswith("Decided: ")
    again = Observed.from_body({"status": planned.status_dict}, {})
    assert decision_actions(again, res) == []


def test_an_invalid_spec_is_told_once() -> None:
    acts = invalid_spec_actions(Observed(), "spec.x: bad", NOW, {})
    assert [type(a) for a in acts] == [PatchStatus, PostEvent]
    written = acts[0]
    assert isinstance(written, PatchStatus)
    assert invalid_spec_actions(Observed(), "spec.x: bad", NOW, written.status) == []


def test_one_backoff_formula_doubling_per_backoff_step_up_to_five_minutes() -> None:
    assert backoff_delay(0) is None
    assert [backoff_delay(n) for n in (1, 2, 3)] == [10.0, 20.0, 40.0]
    assert backoff_delay(50) == actions.BACKOFF_MAX_S
    assert next_failures(0, blocked=True, trigger="child") == 1
    assert next_failures(1, blocked=True, trigger="child") == 1  # a watch event: no step
    assert next_failures(1, blocked=True, trigger=actions.BACKOFF_TRIGGER) == 2
    assert next_failures(3, blocked=False, trigger=actions.BACKOFF_TRIGGER) == 0


def test_follow_ups_backoff_wins_over_recheck_and_changed_children_look_again() -> None:
    assert follow_ups(retry_after=10.0, recheck_after=5.0, changed_meanwhile=False) == [
        FollowUp(10.0, actions.BACKOFF_TRIGGER)
    ]
    assert follow_ups(retry_after=None, recheck_after=5.0, changed_meanwhile=True) == [
        FollowUp(5.0, actions.RECHECK_TRIGGER),
        FollowUp(actions.CHILD_DEBOUNCE_S, actions.CHILD_TRIGGER),
    ]
    assert follow_ups(retry_after=None, recheck_after=None, changed_meanwhile=False) == []


def test_actions_describe_one_line_each() -> None:
    manifest = {"kind": "Service", "metadata": {"name": "a-api"}}
    lines = actions.describe([Apply(manifest, unseen=True), Delete("v1", "Service", "b")])
    assert lines == ["create Service/a-api", "delete Service/b"]


def test_the_cluster_preview_creates_what_is_missing_and_deletes_a_stale_child() -> None:
    from deepseek_operator.commands.cluster_actions import cluster_actions

    obj, _ = _planned()
    live = {"metadata": {"name": "a", "namespace": "llm", "uid": "uid-a", "generation": 3}}
    stale = _ours({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a-old"}})
    acts = cluster_actions(
        obj, live, {("Service", "a-old"): stale}, gb200_pool(), NOW, ClusterApis()
    )
    lines = actions.describe(acts)
    assert lines[0] == "patch status"
    assert "delete Service/a-old" in lines
    assert "create Deployment/a" in lines
    # not in the cluster yet: nothing there is its own, so nothing is deleted
    fresh = actions.describe(
        cluster_actions(obj, None, {("Service", "a-old"): stale}, gb200_pool(), NOW, ClusterApis())
    )
    assert not [line for line in fresh if line.startswith("delete")]


def test_a_reduced_child_keeps_what_the_reconciler_reads_and_judges_drift_alike() -> None:
    import sys

    from deepseek_operator.actions.children import reduced_child

    obj, _ = _planned()
    planned = plan(obj, gb200_pool(), Observed(), NOW, ClusterApis())
    manifest = planned.objects[0]
    live = _ours(manifest)
    live["metadata"]["managedFields"] = [{"manager": "x", "fieldsV1": {"f:spec": {}}}]
    live["status"] = {"readyReplicas": 1, "conditions": [{"type": "Available"}]}
    small = reduced_child(live)
    assert small["status"] == live["status"] and "managedFields" not in str(small)
    assert small["metadata"]["ownerReferences"] == live["metadata"]["ownerReferences"]
    assert split_children({("K", "n"): small}, "uid-a")[0]  # still ours
    assert not actions.drifted(small, manifest)
    edited = copy.deepcopy(live)
    edited["metadata"]["labels"] = {}
    assert actions.drifted(reduced_child(edited), manifest)
    assert sys.getsizeof(small[actions.PACKED_BODY]) < len(str(live)) + 100


def test_a_status_field_the_plan_no_longer_holds_is_patched_away() -> None:
    # A merge patch keeps what it does not name: status.endpoint and status.router of a router
    # turned off are named null, or they would stay in the live status forever.
    old = {"observedGeneration": 1, "endpoint": {"service": "a-api"}, "router": {"replicas": 1}}
    new = {"observedGeneration": 2}
    writes = write_actions([], {}, {}, new, old, owner_name="a")
    patch = writes.actions[0]
    assert isinstance(patch, PatchStatus)
    assert patch.status == {"observedGeneration": 2, "endpoint": None, "router": None}
