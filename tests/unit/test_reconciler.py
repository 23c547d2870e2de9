"""Narrow handler unit tests of the Reconciler with a recording fake API (no kopf, no server).

The real API server tests live in tests/e2e; these pin down write counts and ownership, which
are hard to observe there.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest
import yaml
from kubernetes.client.rest import ApiException

from deepseek_operator.controller.reconcile import Reconciler
from deepseek_operator.kube.client import (
    EncodedObject,
    ForeignObject,
    OwnerGone,
    controlled_by,
    describe_owner,
)
from tests.unit.factories import agent_labels, gb200_pool, node
from tests.unit.factories import inventory as make_inventory

SEED = yaml.safe_load(open("examples/dsv41-flash-gb200.yaml").read())  # noqa: SIM115


class FakeKube:
    """Records writes; answers like the API server (resourceVersion grows)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.statuses: list[dict[str, Any]] = []
        self.rv = 100
        self.deleted: set[str] = set()  # uids the "API server" no longer has
        self.refuse: dict[str, str] = {}  # "Kind/name" -> the API server's message (HTTP 422)
        self.refuse_status = 422
        self.existing: dict[str, dict[str, Any]] = {}  # "Kind/name" -> an object already there

    async def apply(self, encoded: Any, only_if_ours: str | None = None) -> dict[str, Any]:
        obj = encoded.decoded() if isinstance(encoded, EncodedObject) else encoded
        child = f"{obj['kind']}/{obj['metadata']['name']}"
        if only_if_ours is not None:  # KubeClient reads the object first, in the same call
            self.calls.append(("read", child))
            there = self.existing.get(child)
            if there is not None and not controlled_by(there, only_if_ours):
                raise ForeignObject(obj["kind"], obj["metadata"]["name"], describe_owner(there))
        if child in self.refuse:
            self.calls.append(("refused", child))
            raise ApiException(
                status=self.refuse_status,
                reason="Unprocessable Entity",
                body=json.dumps({"message": self.refuse[child]}),
            )
        self.rv += 1
        self.calls.append(("apply", f"{obj['kind']}/{obj['metadata']['name']}"))
        out = copy.deepcopy(obj)
        out["metadata"]["resourceVersion"] = str(self.rv)
        return out

    async def names_taken(self, objs: list[Any], uid: str) -> list[str]:
        out = []
        for encoded in objs:
            obj = encoded.decoded() if isinstance(encoded, EncodedObject) else encoded
            child = f"{obj['kind']}/{obj['metadata']['name']}"
            self.calls.append(("read", child))
            there = self.existing.get(child)
            if there is not None and not controlled_by(there, uid):
                out.append(
                    ForeignObject(
                        obj["kind"], obj["metadata"]["name"], describe_owner(there)
                    ).message
                )
        return out

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        self.calls.append(("delete", f"{kind}/{name}"))

    async def check_owner(self, namespace: str, name: str, uid: str) -> None:
        self.calls.append(("get", name))
        if uid in self.deleted:
            raise OwnerGone(f"{namespace}/{name}")

    async def patch_status(
        self, namespace: str, name: str, uid: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        if uid in self.deleted:
            self.calls.append(("status-404", name))
            raise OwnerGone(f"{namespace}/{name}")
        self.rv += 1
        self.calls.append(("status", name))
        self.statuses.append(copy.deepcopy(status))
        return {"metadata": {"resourceVersion": str(self.rv)}, "status": status}


def _body(name: str) -> dict[str, Any]:
    body = copy.deepcopy(SEED)
    body["metadata"] = {
        "name": name,
        "namespace": "llm",
        "generation": 1,
        "uid": f"uid-{name}",
        "resourceVersion": "10",
    }
    return body


def _run(
    rec: Reconciler,
    body: dict[str, Any],
    inv: Any,
    live: dict[Any, Any] | None = None,
    trigger: str = "test",
) -> Any:
    key = ("llm", body["metadata"]["name"])
    return asyncio.run(rec.reconcile(key, lambda: body, lambda: inv, lambda: live or {}, trigger))


def test_two_servings_in_one_namespace_never_touch_each_others_children() -> None:
    kube = FakeKube()
    events: list[str] = []
    rec = Reconciler(kube, post_event=lambda body, t, r, m: events.append(body["metadata"]["name"]))  # type: ignore[arg-type]
    inv = gb200_pool()
    a, b = _body("a"), _body("b")
    _run(rec, a, inv)
    _run(rec, b, inv)
    _run(rec, a, inv)  # the watch has delivered nothing yet: index shows no children
    _run(rec, b, inv)
    assert not [c for c in kube.calls if c[0] == "delete"]
    assert sorted(c for c in kube.calls if c[0] == "apply") == [
        ("apply", "Deployment/a"), ("apply", "Deployment/b"),
        ("apply", "Service/a-api"), ("apply", "Service/b-api"),
    ]  # fmt: skip
    assert [c for c in kube.calls if c[0] == "status"] == [("status", "a"), ("status", "b")]
    assert events == ["a", "b"]  # one decision event each, not one per reconcile


def test_the_written_status_is_kept_only_until_the_watch_delivers_it() -> None:
    kube = FakeKube()
    rec = Reconciler(kube)  # type: ignore[arg-type]
    a = _body("a")
    _run(rec, a, gb200_pool())
    written = rec.records.ensure(("llm", "a")).written
    assert written is not None
    written_rv = written[0]
    rec.records.serving_observed(("llm", "a"), a)  # an older version: our status still counts
    status = rec.records.ensure(("llm", "a")).freshest(a)["status"]
    assert status["conditions"] and status != a.get("status")
    echo = {**a, "metadata": {**a["metadata"], "resourceVersion": str(written_rv)}}
    rec.records.serving_observed(("llm", "a"), {**echo, "status": status})
    assert rec.records.ensure(("llm", "a")).written is None
    kube.calls.clear()
    _run(rec, {**echo, "status": status}, gb200_pool())  # the delivered body is read as it is
    assert [c for c in kube.calls if c[0] == "status"] == []


def test_a_child_deleted_by_hand_is_applied_again() -> None:
    kube = FakeKube()
    rec = Reconciler(kube)  # type: ignore[arg-type]
    inv = gb200_pool()
    a = _body("a")
    _run(rec, a, inv)
    rec.records.child_deleted("llm", "Service", "a-api", "a")
    kube.calls.clear()
    _run(rec, a, inv)
    # The status is unchanged, so one GET proves the owner still lives before the write; the
    # child the watches no longer show is read before it is written (someone else's may be there).
    assert kube.calls == [("get", "a"), ("read", "Service/a-api"), ("apply", "Service/a-api")]


def test_only_the_echo_of_our_own_apply_is_recognised_as_our_write() -> None:
    kube = FakeKube()
    rec = Reconciler(kube)  # type: ignore[arg-type]
    _run(rec, _body("a"), gb200_pool())
    written = rec.records.ensure(("llm", "a")).applied[("Deployment", "a")]
    echo = copy.deepcopy(written)
    later = copy.deepcopy(written)  # e.g. the Deployment controller's status update
    later["metadata"]["resourceVersion"] = str(int(written["metadata"]["resourceVersion"]) + 5)
    assert not rec.records.child_observed(
        "llm", "b", "Deployment", "a", echo
    )  # another owner's child
    assert (
        rec.records.child_observed("llm", "a", "Service", "a-api", echo) is False
    )  # another kind's
    assert rec.records.child_observed("llm", "a", "Deployment", "a", echo)
    # The store now holds our version: the apply response is dropped, nothing more is ours.
    assert ("Deployment", "a") not in rec.records.ensure(("llm", "a")).applied
    assert not rec.records.child_observed("llm", "a", "Deployment", "a", later)
    _run(rec, _body("a"), gb200_pool())
    rec.records.child_deleted("llm", "Service", "a-api", "a")
    assert ("Service", "a-api") not in rec.records.ensure(("llm", "a")).applied


def test_a_stale_child_of_the_same_serving_is_deleted() -> None:
    kube = FakeKube()
    rec = Reconciler(kube)  # type: ignore[arg-type]
    a = _body("a")
    ours = [{"kind": "DeepSeekServing", "name": "a", "uid": "uid-a", "controller": True}]
    live = {
        ("StatefulSet", "a-r0-n0"): {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "a-r0-n0", "resourceVersion": "5", "ownerReferences": ours},
        },
        # The Service an earlier version named after the serving (now "a-api"): ours, so gone.
        ("Service", "a"): {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "a", "resourceVersion": "6", "ownerReferences": ours},
        },
    }
    _run(rec, a, gb200_pool(), live)
    assert ("delete", "StatefulSet/a-r0-n0") in kube.calls
    assert ("delete", "Service/a") in kube.calls


def test_an_object_with_our_labels_that_is_not_ours_is_never_deleted_nor_written() -> None:
    kube = FakeKube()
    events: list[tuple[str, str, str]] = []
    rec = Reconciler(kube, post_event=lambda body, t, r, m: events.append((t, r, m)))  # type: ignore[arg-type]
    earlier = [{"kind": "DeepSeekServing", "name": "a", "uid": "uid-old", "controller": True}]
    live = {
        # labelled like our children, owned by nobody: not ours to delete
        ("Service", "a"): {"kind": "Service", "metadata": {"name": "a", "resourceVersion": "6"}},
        # the Deployment of a deleted object of the same name, still being garbage-collected
        ("Deployment", "a"): {
            "kind": "Deployment",
            "metadata": {"name": "a", "resourceVersion": "7", "ownerReferences": earlier},
        },
    }
    outcome = _run(rec, _body("a"), gb200_pool(), live)
    assert not [c for c in kube.calls if c[0] == "delete"]
    assert ("apply", "Deployment/a") not in kube.calls
    assert ("apply", "Service/a-api") in kube.calls
    assert outcome.foreign == [
        "Deployment/a already exists and belongs to DeepSeekServing/a (uid uid-old): it is not "
        "this DeepSeekServing's, and the operator does not write over it (delete or rename that "
        "object)"
    ]
    assert outcome.retry_after == 10
    conditions = {c["type"]: c for c in kube.statuses[-1]["conditions"]}
    assert conditions["WorkloadApplied"]["status"] == "False"
    assert conditions["WorkloadApplied"]["reason"] == "ForeignObjectInTheWay"
    assert conditions["WorkloadApplied"]["message"] == outcome.foreign[0]
    assert conditions["Ready"]["reason"] == "ForeignObjectInTheWay"
    assert [e[:2] for e in events if e[1] != "BackendResolved"] == [
        ("Warning", "ForeignObjectInTheWay")
    ]


def test_a_foreign_object_found_on_create_is_reported_once_backs_off_and_yields_once_gone() -> None:
    kube = FakeKube()
    events: list[tuple[str, str, str]] = []
    rec = Reconciler(kube, post_event=lambda body, t, r, m: events.append((t, r, m)))  # type: ignore[arg-type]
    # LeaderWorkerSet's headless Service, or anybody's: the watches (our labels) never show it.
    kube.existing["Service/a-api"] = {
        "metadata": {
            "name": "a-api",
            "ownerReferences": [
                {"kind": "LeaderWorkerSet", "name": "x", "uid": "u-x", "controller": True}
            ],
        }
    }
    a, inv = _body("a"), gb200_pool()
    first = _run(rec, a, inv)
    assert ("read", "Service/a-api") in kube.calls and ("apply", "Service/a-api") not in kube.calls
    assert ("apply", "Deployment/a") in kube.calls  # the rest of the workload is written
    assert first.foreign == [
        "Service/a-api already exists and belongs to LeaderWorkerSet/x: it is not this "
        "DeepSeekServing's, and the operator does not write over it (delete or rename that object)"
    ]
    assert first.retry_after == 10
    a["status"] = kube.statuses[-1]
    assert _run(rec, a, inv, trigger="backoff").retry_after == 20
    foreign_events = [e for e in events if e[1] == "ForeignObjectInTheWay"]
    assert len(foreign_events) == 1 and "LeaderWorkerSet/x" in foreign_events[0][2]
    # Nobody's object: said so.
    kube.existing["Service/a-api"] = {"metadata": {"name": "a-api"}}
    assert "Service/a-api already exists and has no owner:" in _run(rec, a, inv).foreign[0]
    # Deleted: the next try (the back-off's) creates ours and the condition flips.
    del kube.existing["Service/a-api"]
    a["status"] = kube.statuses[-1]
    done = _run(rec, a, inv)
    assert not done.foreign and done.retry_after is None
    assert ("apply", "Service/a-api") in kube.calls
    conditions = {c["type"]: c for c in kube.statuses[-1]["conditions"]}
    assert conditions["WorkloadApplied"]["status"] == "True"


def test_node_churn_keeps_the_written_decision_without_rewrites() -> None:
    kube = FakeKube()
    rec = Reconciler(kube)  # type: ignore[arg-type]
    a = _body("a")
    _run(
        rec, a, make_inventory(node("gb0", agent=agent_labels()), node("gb1", agent=agent_labels()))
    )
    kube.calls.clear()
    # One tray breaks; the other still holds the EP group: same decision, status message changes.
    _run(
        rec,
        a,
        make_inventory(
            node("gb0", agent=agent_labels(fully_connected="false")),
            node("gb1", agent=agent_labels()),
        ),
    )
    assert [c[0] for c in kube.calls] == ["status"]


def test_a_spec_the_api_server_should_have_refused_gets_invalid_spec_once() -> None:
    kube = FakeKube()
    events: list[str] = []
    rec = Reconciler(kube, post_event=lambda body, t, r, m: events.append(r))  # type: ignore[arg-type]
    bad = _body("a")
    bad["spec"]["moeBackend"] = "megamoe"
    _run(rec, bad, gb200_pool())
    _run(rec, bad, gb200_pool())
    assert kube.calls == [("status", "a")]  # no children, one status write
    assert events == ["InvalidSpec"]
    status = kube.statuses[-1]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["BackendResolved"]["reason"] == "InvalidSpec"
    assert 'spec.moeBackend: Invalid value: "megamoe"' in conditions["Ready"]["message"]


def test_an_object_is_parsed_once_per_generation(monkeypatch: Any) -> None:
    from deepseek_operator.controller import records as records_module

    parsed: list[int] = []
    real = records_module.parse_serving

    def counting(obj: dict[str, Any]) -> Any:
        parsed.append(obj["metadata"]["generation"])
        return real(obj)

    monkeypatch.setattr(records_module, "parse_serving", counting)
    rec = Reconciler(FakeKube())  # type: ignore[arg-type]
    inv = gb200_pool(2)
    body = _body("a")
    for _ in range(3):  # child events, node churn: the same generation
        _run(rec, body, inv)
    body["spec"]["replicas"] = 2
    body["metadata"]["generation"] = 2
    _run(rec, body, inv)
    assert parsed == [1, 2]


def test_a_deleted_owner_ends_the_work_and_is_never_reconciled_again() -> None:
    kube = FakeKube()
    rec = Reconciler(kube)
    inv = gb200_pool()
    a = _body("a")
    _run(rec, a, inv)
    # The watch restarted across the deletion: the index still serves the old body, and the
    # garbage collector deleted the children (the index shows none).
    kube.deleted.add("uid-a")
    rec.records.child_deleted("llm", "Deployment", "a", "a")
    rec.records.child_deleted("llm", "Service", "a-api", "a")
    kube.calls.clear()
    assert _run(rec, a, inv) is None
    assert kube.calls == [("get", "a")]  # proven gone before any child write
    kube.calls.clear()
    for _ in range(3):
        assert _run(rec, a, inv) is None
    assert kube.calls == []  # remembered: no more requests, no more applies
    # A new object under the same name (another uid) is served normally.
    again = _body("a")
    again["metadata"]["uid"] = "uid-a2"
    assert _run(rec, again, inv) is not None
    assert ("apply", "Deployment/a") in kube.calls


def test_a_status_write_for_a_deleted_owner_ends_the_work() -> None:
    kube = FakeKube()
    rec = Reconciler(kube)
    kube.deleted.add("uid-a")
    assert _run(rec, _body("a"), gb200_pool()) is None
    assert kube.calls == [("status-404", "a")]  # nothing applied after the 404


def test_a_refused_child_is_reported_and_retried_with_growing_backoff() -> None:
    kube = FakeKube()
    events: list[tuple[str, str, str]] = []
    rec = Reconciler(kube, post_event=lambda body, t, r, m: events.append((t, r, m)))  # type: ignore[arg-type]
    kube.refuse["Deployment/a"] = (
        'Deployment.apps "a" is invalid: spec.template.spec.containers[0].env[0].name: Required value'
    )
    a, inv = _body("a"), gb200_pool()
    first = _run(rec, a, inv)
    assert first.refused and first.retry_after == 10
    status = kube.statuses[-1]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["WorkloadApplied"]["status"] == "False"
    assert conditions["WorkloadApplied"]["reason"] == "WorkloadRefused"
    assert "env[0].name: Required value" in conditions["WorkloadApplied"]["message"]
    assert conditions["Ready"]["reason"] == "WorkloadRefused"
    assert [e[:2] for e in events if e[1] == "WorkloadRefused"] == [("Warning", "WorkloadRefused")]
    a["status"] = status
    assert _run(rec, a, inv, trigger="backoff").retry_after == 20
    # A watch event meanwhile tries again without lengthening the wait; the next step does.
    assert _run(rec, a, inv, trigger="child").retry_after == 20
    assert _run(rec, a, inv, trigger="backoff").retry_after == 40
    # The same refusal again: no new event, no status rewrite.
    assert len([e for e in events if e[1] == "WorkloadRefused"]) == 1
    # Accepted at last: WorkloadApplied flips to True and the backoff resets.
    del kube.refuse["Deployment/a"]
    done = _run(rec, a, inv)
    assert not done.refused and done.retry_after is None
    conditions = {c["type"]: c for c in kube.statuses[-1]["conditions"]}
    assert conditions["WorkloadApplied"]["status"] == "True"
    assert conditions["WorkloadApplied"]["reason"] == "Applied"


def test_a_server_error_answer_is_a_refusal_too_with_the_same_backoff() -> None:
    kube = FakeKube()
    kube.refuse_status = 500
    kube.refuse["Deployment/a"] = (
        "failed to create typed patch object (llm/a; apps/v1, Kind=Deployment): "
        '.spec.template.spec.containers[name="vllm"].env: duplicate entries for key [name="A"]'
    )
    events: list[str] = []
    rec = Reconciler(kube, post_event=lambda body, t, r, m: events.append(r))  # type: ignore[arg-type]
    a, inv = _body("a"), gb200_pool()
    first = _run(rec, a, inv)  # never raised (it was retried every 10 s, out of the status)
    assert first.retry_after == 10 and "duplicate entries" in first.refused[0]
    conditions = {c["type"]: c for c in kube.statuses[-1]["conditions"]}
    assert conditions["WorkloadApplied"]["reason"] == "WorkloadRefused"
    assert "duplicate entries for key" in conditions["WorkloadApplied"]["message"]
    assert events.count("WorkloadRefused") == 1
    a["status"] = kube.statuses[-1]
    assert _run(rec, a, inv, trigger="backoff").retry_after == 20


def test_a_try_again_answer_is_an_ordinary_error_retry() -> None:
    kube = FakeKube()
    kube.refuse_status = 429
    kube.refuse["Deployment/a"] = "too many requests"
    rec = Reconciler(kube)  # type: ignore[arg-type]
    with pytest.raises(ApiException):
        _run(rec, _body("a"), gb200_pool())


def test_a_status_only_reconcile_leaves_a_false_workload_applied_as_it_is() -> None:
    kube = FakeKube()
    kube.existing["Service/a-api"] = {"metadata": {"name": "a-api"}}
    rec = Reconciler(kube)  # type: ignore[arg-type]
    a = _body("a")
    _run(rec, a, gb200_pool())
    a["status"] = kube.statuses[-1]
    writes = len(kube.statuses)
    asyncio.run(rec.reconcile(("llm", "a"), lambda: a, gb200_pool, dict, "pods", status_only=True))
    # it wrote no child, so it cannot say they were all accepted
    assert len(kube.statuses) == writes


def test_a_status_only_reconcile_writes_the_status_and_never_a_child() -> None:
    from deepseek_operator.plan import PodSeen

    kube = FakeKube()
    rec = Reconciler(kube)  # type: ignore[arg-type]
    a = _body("a")
    key = ("llm", "a")
    # Nothing applied yet (a missing child), pods seen: a pod event must still not write it.
    groups = {"": {0: {0: PodSeen("a-0", "gb-0", True)}}}
    asyncio.run(
        rec.reconcile(
            key, lambda: a, gb200_pool, dict, "pods", groups_of=lambda: groups, status_only=True
        )
    )
    assert [c[0] for c in kube.calls] == ["status"]
    _run(rec, a, gb200_pool())  # a full reconcile applies them
    assert ("apply", "Deployment/a") in kube.calls


class EchoingKube(FakeKube):
    """The child watch delivers a version of each child before the apply's response returns:
    our own write's echo, or (``overtaken``) a newer write by someone else."""

    def __init__(self, rec_of: Any, overtaken: set[str]) -> None:
        super().__init__()
        self.rec_of = rec_of
        self.overtaken = overtaken
        self.echoes: list[bool] = []  # what child_observed answered for each early event

    async def apply(self, encoded: Any, only_if_ours: str | None = None) -> dict[str, Any]:
        obj = encoded.decoded() if isinstance(encoded, EncodedObject) else encoded
        response = await super().apply(obj, only_if_ours)
        obj = obj.decoded() if isinstance(obj, EncodedObject) else obj
        early = copy.deepcopy(response)
        if f"{obj['kind']}/{obj['metadata']['name']}" in self.overtaken:
            early["metadata"]["resourceVersion"] = str(self.rv + 50)
        rec = self.rec_of()
        self.echoes.append(
            rec.records.child_observed("llm", "a", obj["kind"], obj["metadata"]["name"], early)
        )
        await asyncio.sleep(0)
        return response


@pytest.mark.parametrize(("overtaken", "changed"), [(set(), False), ({"Service/a-api"}, True)])
def test_a_watch_event_before_the_apply_returns_is_an_echo_unless_someone_wrote_after_us(
    overtaken: set[str], changed: bool
) -> None:
    holder: list[Reconciler] = []
    kube = EchoingKube(lambda: holder[0], overtaken)
    rec = Reconciler(kube)  # type: ignore[arg-type]
    holder.append(rec)
    outcome = _run(rec, _body("a"), gb200_pool())
    # No early event asks for a reconcile by itself; the apply's end decides.
    assert kube.echoes == [True, True]
    assert outcome.children_changed_meanwhile is changed
    assert all(not r.in_flight for _k, r in rec.records.items())
    # A version the watch already delivered is never kept a second time as an apply response.
    assert all(not r.applied for _k, r in rec.records.items())


def test_an_apply_response_is_kept_until_the_watch_delivers_that_version() -> None:
    kube = FakeKube()
    rec = Reconciler(kube)  # type: ignore[arg-type]
    _run(rec, _body("a"), gb200_pool())
    record = rec.records.get(("llm", "a"))
    assert record is not None
    assert set(record.applied) == {("Deployment", "a"), ("Service", "a-api")}


def test_a_reconcile_waiting_for_its_child_writes_holds_no_spec_plan_or_status() -> None:
    """In a burst, a thousand reconciles wait for their child applies at once: what each holds
    meanwhile is the operator's peak memory. Only the encoded children and round 2's few facts
    may stay; not the parsed spec, the plan, the decision, the body or the status as objects."""
    from deepseek_operator.api.load import ServingObject
    from deepseek_operator.engine.resolution import Resolution
    from deepseek_operator.plan import Observed, Plan

    class SlowKube(FakeKube):
        def __init__(self) -> None:
            super().__init__()
            self.release = asyncio.Event()
            self.waiting = asyncio.Event()

        async def apply(self, encoded: Any, only_if_ours: str | None = None) -> dict[str, Any]:
            self.waiting.set()
            await self.release.wait()
            return await super().apply(encoded, only_if_ours)

    def held(task: asyncio.Task[Any]) -> list[Any]:
        values: list[Any] = []
        coro: Any = task.get_coro()
        while coro is not None and getattr(coro, "cr_frame", None) is not None:
            values.extend(coro.cr_frame.f_locals.values())
            coro = coro.cr_await
        return values

    async def scenario() -> list[Any]:
        kube = SlowKube()
        rec = Reconciler(kube)  # type: ignore[arg-type]
        body, inv = _body("a"), gb200_pool()
        task = asyncio.create_task(
            rec.reconcile(("llm", "a"), lambda: body, lambda: inv, lambda: {}, "create")
        )
        await kube.waiting.wait()
        assert kube.calls == [("status", "a")]  # the status went first; the applies wait
        values = [
            v for t in asyncio.all_tasks() if t is not asyncio.current_task() for v in held(t)
        ]
        kube.release.set()
        await task
        return values

    values = asyncio.run(scenario())
    assert values  # the walk saw the waiting frames
    kept = [type(v).__name__ for v in values]
    forbidden = (ServingObject, Resolution, Plan, Observed)
    assert not [v for v in values if isinstance(v, forbidden)], kept
    assert not [v for v in values if isinstance(v, dict) and "conditions" in v], kept
    assert not [v for v in values if isinstance(v, dict) and "spec" in v], kept
