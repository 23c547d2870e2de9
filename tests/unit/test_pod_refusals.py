"""StatefulSet pod refusals (LeaderWorkerSet replicas): when the FailedCreate Event is read."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from deepseek_operator.controller import pod_refusals
from deepseek_operator.controller.pod_refusals import RECHECKS, StatefulSetRefusals, missing_pods

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

    async def failed_create(self, namespace: str, uid: str) -> str | None:
        self.reads += 1
        return self.message


def _read(refusals: StatefulSetRefusals, *sts: dict[str, Any]) -> tuple[tuple[str, ...], Any]:
    return asyncio.run(refusals.read("ns", sts))


def test_missing_pods_counts_only_an_observed_spec() -> None:
    assert missing_pods(_sts(2, 0)) == 2
    assert missing_pods(_sts(2, 2)) == 0
    assert missing_pods(_sts(2, 0, generation=2)) == 0  # status not caught up yet


def test_a_refusal_is_read_once_per_resource_version_and_clears_with_the_pods() -> None:
    fake = FakeEvents(REFUSED)
    refusals = StatefulSetRefusals(fake)  # type: ignore[arg-type]
    assert _read(refusals, _sts(2, 0)) == ((f"StatefulSet/d: FailedCreate: {REFUSED}",), None)
    assert _read(refusals, _sts(2, 0)) == ((f"StatefulSet/d: FailedCreate: {REFUSED}",), None)
    assert fake.reads == 1
    assert _read(refusals, _sts(2, 2, rv="2")) == ((), None)  # the pods were created
    assert fake.reads == 1


def test_missing_pods_without_an_event_are_looked_at_again_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pod_refusals, "RECHECK_S", 0.0)
    fake = FakeEvents(None)
    refusals = StatefulSetRefusals(fake)  # type: ignore[arg-type]
    for _ in range(RECHECKS - 1):
        assert _read(refusals, _sts(2, 0)) == ((), 0.0)
    assert _read(refusals, _sts(2, 0)) == ((), None)
    assert _read(refusals, _sts(2, 0)) == ((), None)
    assert fake.reads == RECHECKS
    fake.message = REFUSED  # a new resourceVersion reads again
    assert _read(refusals, _sts(2, 1, rv="2"))[0] == (f"StatefulSet/d: FailedCreate: {REFUSED}",)
