"""StatefulSet pod refusals (LeaderWorkerSet replicas): when the FailedCreate Event is read."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from deepseek_operator.actions.lws import absent_statefulsets, missing_pods
from deepseek_operator.controller import pod_refusals
from deepseek_operator.controller.pod_refusals import RECHECKS, StatefulSetRefusals

REFUSED = (
    'Create Pod d-0 in StatefulSet d failed error: pods "d-0" is forbidden: violates PodSecurity'
)


def _sts(wanted: int, created: int, rv: str = "1", generation: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": "d", "uid": "u1", "generation": generation, "resourceVersion": rv},
        "spec": {"replicas": wanted},
        "status": {"observedGeneration": 1, "replicas": created},
    }


class FakeEvents:
    """Stands in for KubeClient.failed_create only: counts the Event LISTs."""

    def __init__(self, message: str | None) -> None:
        self.message = message
        self.reads = 0

    async def failed_create(self, namespace: str, uid: str) -> list[str]:
        self.reads += 1
        return [self.message] if self.message is not None else []


def _read(
    refusals: StatefulSetRefusals, memo: pod_refusals.Memo, *sts: dict[str, Any]
) -> tuple[tuple[str, ...], Any]:
    """``refusals.read`` with ``memo`` (one per serving, as its record keeps it)."""
    return asyncio.run(refusals.read("ns", sts, None, memo))


def test_missing_pods_counts_only_an_observed_spec() -> None:
    assert missing_pods(_sts(2, 0)) == 2
    assert missing_pods(_sts(2, 2)) == 0
    assert missing_pods(_sts(2, 0, generation=2)) == 0  # status not caught up yet


def test_a_refusal_is_read_once_per_resource_version_and_clears_with_the_pods() -> None:
    fake = FakeEvents(REFUSED)
    refusals = StatefulSetRefusals(fake)  # type: ignore[arg-type]
    memo: pod_refusals.Memo = {}
    assert _read(refusals, memo, _sts(2, 0)) == ((f"StatefulSet/d: FailedCreate: {REFUSED}",), None)
    assert _read(refusals, memo, _sts(2, 0)) == ((f"StatefulSet/d: FailedCreate: {REFUSED}",), None)
    assert fake.reads == 1
    assert _read(refusals, memo, _sts(2, 2, rv="2")) == ((), None)  # the pods were created
    assert fake.reads == 1


def test_missing_pods_without_an_event_are_looked_at_again_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pod_refusals, "RECHECK_S", 0.0)
    fake = FakeEvents(None)
    refusals = StatefulSetRefusals(fake)  # type: ignore[arg-type]
    memo: pod_refusals.Memo = {}
    for _ in range(RECHECKS - 1):
        assert _read(refusals, memo, _sts(2, 0)) == ((), 0.0)
    assert _read(refusals, memo, _sts(2, 0)) == ((), None)
    assert _read(refusals, memo, _sts(2, 0)) == ((), None)
    assert fake.reads == RECHECKS
    fake.message = REFUSED  # a new resourceVersion reads again
    assert _read(refusals, memo, _sts(2, 1, rv="2"))[0] == (
        f"StatefulSet/d: FailedCreate: {REFUSED}",
    )


QUOTA = (
    'statefulsets.apps "d" is forbidden: exceeded quota: no-sts, requested: '
    "count/statefulsets.apps=1, used: count/statefulsets.apps=0, limited: count/statefulsets.apps=0"
)


def _lws(size: int = 2, rv: str = "7") -> dict[str, Any]:
    return {
        "metadata": {"name": "d", "uid": "lws-1", "resourceVersion": rv},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": size}},
    }


def _named(name: str, uid: str, created: int) -> dict[str, Any]:
    sts = _sts(created, created)
    sts["metadata"] = {**sts["metadata"], "name": name, "uid": uid}
    return sts


class FakeLwsEvents:
    """Stands in for KubeClient.failed_create: FailedCreate messages per object uid, newest first."""

    def __init__(self, messages: dict[str, list[str]]) -> None:
        self.messages = messages
        self.reads: list[str] = []

    async def failed_create(self, namespace: str, uid: str) -> list[str]:
        self.reads.append(uid)
        return self.messages.get(uid, [])


def test_absent_statefulsets_are_the_leader_then_a_worker_per_leader_pod() -> None:
    assert absent_statefulsets(_lws(), []) == {"d"}
    assert absent_statefulsets(_lws(), [_named("d", "s0", 2)]) == {"d-0", "d-1"}
    assert absent_statefulsets(_lws(), [_named("d", "s0", 2), _named("d-1", "s1", 1)]) == {"d-0"}
    assert absent_statefulsets(_lws(size=1), [_named("d", "s0", 2)]) == set()


def test_the_leaderworkerset_controllers_own_failed_create_is_reported_while_its_target_is_absent() -> (
    None
):
    leader = f"Failed to create leader statefulset d: {QUOTA}"
    fake = FakeLwsEvents({"lws-1": [leader]})
    refusals = StatefulSetRefusals(fake)  # type: ignore[arg-type]
    memo: pod_refusals.Memo = {}
    found, recheck = asyncio.run(refusals.read("ns", [], _lws(), memo))
    assert found == (f"LeaderWorkerSet/d: FailedCreate: {leader}",) and recheck is None
    asyncio.run(refusals.read("ns", [], _lws(), memo))
    assert fake.reads == ["lws-1"]  # once per resourceVersion and StatefulSets present
    # The leader StatefulSet exists now: that Event is history, and a worker's is the reason.
    worker = f"Failed to create worker statefulset for leader pod d-1: {QUOTA}"
    fake.messages["lws-1"] = [worker, leader]
    found, _ = asyncio.run(refusals.read("ns", [_named("d", "s0", 2)], _lws(), memo))
    assert found == (f"LeaderWorkerSet/d: FailedCreate: {worker}",)
    found, recheck = asyncio.run(
        refusals.read("ns", [_named("d", "s0", 2), _named("d-0", "w0", 1)], _lws(), memo)
    )
    assert found == (f"LeaderWorkerSet/d: FailedCreate: {worker}",)
    # Everything exists: nothing is read and nothing reported, however old Events read.
    reads = len(fake.reads)
    everything = [_named("d", "s0", 2), _named("d-0", "w0", 1), _named("d-1", "w1", 1)]
    assert asyncio.run(refusals.read("ns", everything, _lws(), memo)) == ((), None)
    assert len(fake.reads) == reads


def test_an_absent_leader_statefulset_without_an_event_yet_is_looked_at_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pod_refusals, "RECHECK_S", 0.0)
    fake = FakeLwsEvents({"lws-1": ["Failed to create headless service for error: x"]})
    refusals = StatefulSetRefusals(fake)  # type: ignore[arg-type]
    memo: pod_refusals.Memo = {}
    assert asyncio.run(refusals.read("ns", [], _lws(), memo)) == ((), 0.0)
