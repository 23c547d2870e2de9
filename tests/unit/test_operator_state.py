"""Narrow unit tests of the operator's event bookkeeping (no kopf run, no API server).

* which DeepSeekServing events reconcile (a new object, a new generation, the start-up listing)
  and which do not (a status echo, a metadata edit, a deletion);
* how scheduled reconciles fold together and what they are named after (the metric label the
  e2e tests wait on);
* the writer queue's order: status writes before child applies when every thread is busy.

``OperatorState.reconcile`` is replaced by a recorder: these tests are about what is asked for,
not about the reconcile itself (tests/unit/test_reconciler.py, tests/e2e).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from deepseek_operator.controller.state import OperatorState
from deepseek_operator.kube.write_queue import Priority, WriteQueue

KEY = ("llm", "a")


def _body(uid: str = "uid-a", generation: int = 1, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "llm", "name": "a", "uid": uid, "generation": generation, **meta},
        "spec": {},
    }


def test_the_latest_body_is_kept_packed_with_its_uid_and_node_selector_beside_it() -> None:
    state = OperatorState()
    body = _body(managedFields=[{"manager": "kubectl"}])
    body["spec"] = {"nodeSelector": {"pool": "gb200-a"}, "model": "deepseek-ai/DeepSeek-V4-🚀"}
    state.serving_seen("ADDED", body)
    rec = state.records.get(KEY)
    assert rec is not None and rec.body is not None
    assert isinstance(rec.body.packed, bytes)
    assert (rec.body.uid, dict(rec.body.node_selector)) == ("uid-a", {"pool": "gb200-a"})
    without_managed_fields = {**body, "metadata": dict(body["metadata"])}
    del without_managed_fields["metadata"]["managedFields"]
    assert state.body(KEY) == without_managed_fields
    assert state.body(KEY) is not state.body(KEY)  # a copy each time: a reconcile may edit it


def test_only_a_new_object_a_new_generation_or_the_start_up_listing_reconciles() -> None:
    state = OperatorState()
    assert state.serving_seen(None, _body()) == "resume"  # kopf's initial listing
    assert state.serving_seen("MODIFIED", _body()) is None  # our own status write's echo
    labelled = _body(labels={"team": "x"})
    assert state.serving_seen("MODIFIED", labelled) is None  # metadata only: same generation
    assert state.body(KEY) == labelled  # but the latest body is kept
    assert state.serving_seen("MODIFIED", _body(generation=2)) == "update"
    assert state.serving_seen("DELETED", _body(generation=2)) is None
    assert state.body(KEY) is None
    assert state.serving_seen("MODIFIED", _body(generation=2)) is None  # late event of the dead
    assert state.serving_seen("ADDED", _body(uid="uid-b")) == "create"  # same name, new object
    assert state.serving_seen("ADDED", _body(uid="uid-c")) == "create"
    terminating = _body(uid="uid-c", generation=3, deletionTimestamp="2026-12-01T00:00:00Z")
    assert state.serving_seen("MODIFIED", terminating) is None


def test_a_standby_forgets_what_it_skipped_so_a_takeover_reconciles_it() -> None:
    state = OperatorState(peering="dso", priority=0)
    asked: list[str] = []

    async def record(key: Any, trigger: str, status_only: bool = False) -> None:
        asked.append(trigger)

    state.reconcile = record  # type: ignore[method-assign]
    state.peering.listed_all(
        {"ns/dso": {"status": {"other": {"priority": 10, "lastseen": "2999-01-01T00:00:00Z"}}}}
    )
    assert not state.peering.active()
    assert state.serving_seen(None, _body()) == "resume"
    asyncio.run(state.run_reconcile(KEY, "resume"))
    assert asked == []  # a standby never reconciles
    state.peering.listed_all({})  # the active peer is gone
    assert state.serving_seen(None, _body()) == "resume"  # kopf's listing after the takeover
    asyncio.run(state.run_reconcile(KEY, "resume"))
    assert asked == ["resume"]


def test_resumes_run_a_few_at_a_time_and_a_new_object_does_not_wait_behind_them() -> None:
    """kopf's start-up listing queues every resume (its handler returns at once, so kopf's worker
    does not hold the body while the resume waits); at most RESUME_CONCURRENCY run together and a
    create is reconciled while the rest wait."""
    from deepseek_operator.controller import wiring
    from deepseek_operator.controller.state import RESUME_CONCURRENCY

    running: list[str] = []
    peak: list[int] = [0]
    order: list[str] = []

    async def scenario() -> None:
        state = OperatorState()
        release = asyncio.Event()

        async def record(key: Any, trigger: str, status_only: bool = False) -> None:
            running.append(key[1])
            peak[0] = max(peak[0], len(running))
            order.append(f"{trigger}:{key[1]}")
            if trigger == "resume":
                await release.wait()
            running.remove(key[1])

        state.reconcile = record  # type: ignore[method-assign]
        for i in range(10):
            body = _body(uid=f"uid-{i}")
            body["metadata"]["name"] = f"r{i}"
            # Returns at once (an awaited resume would hold kopf's worker: a timeout here).
            await asyncio.wait_for(wiring.serving_event(type=None, body=body, memo=state), 1.0)
        await asyncio.sleep(0.05)
        assert len(running) == RESUME_CONCURRENCY  # the others wait their turn
        new = _body(uid="uid-new")
        new["metadata"]["name"] = "new"
        await asyncio.wait_for(wiring.serving_event(type="ADDED", body=new, memo=state), 1.0)
        await asyncio.sleep(0.05)
        assert "create:new" in order  # not behind the six resumes still waiting
        release.set()
        await asyncio.sleep(0.05)

    asyncio.run(scenario())
    assert peak[0] == RESUME_CONCURRENCY + 1  # four resumes and the create
    assert sorted(o for o in order if o.startswith("resume")) == sorted(
        f"resume:r{i}" for i in range(10)
    )
    assert running == []


def _scheduled(*asks: tuple[float, str, bool], wait: float = 0.5) -> list[tuple[str, bool]]:
    """Schedule ``asks`` (delay, trigger, status_only) at once; the reconciles that ran."""
    ran: list[tuple[str, bool]] = []

    async def scenario() -> None:
        state = OperatorState()

        async def record(key: Any, trigger: str, status_only: bool = False) -> None:
            ran.append((trigger, status_only))

        state.reconcile = record  # type: ignore[method-assign]
        state.records.ensure(KEY)  # (kopf told of it: a reconcile is kept on its record)
        for delay, trigger, status_only in asks:
            state.schedule(KEY, delay, trigger, status_only=status_only)
        await asyncio.sleep(wait)

    asyncio.run(scenario())
    return ran


@pytest.mark.parametrize(
    ("asks", "expected"),
    [
        # pod events ask for the status only; a node event folded in makes it a full reconcile,
        # named after the node event
        ([(0.05, "pods", True), (0.05, "nodes", False)], [("nodes", False)]),
        ([(0.05, "pods", True), (0.05, "pods", True)], [("pods", True)]),
        # a sooner child event brings a pending node reconcile forward; it keeps its name
        ([(5.0, "nodes", False), (0.01, "child", False)], [("nodes", False)]),
        # a follow-up yields its name to a real event, whichever is due first
        ([(0.05, "recheck", False), (0.05, "child", False)], [("child", False)]),
        ([(5.0, "recheck", False), (0.01, "child", False)], [("child", False)]),
        ([(0.01, "child", False), (5.0, "recheck", False)], [("child", False)]),
    ],
)
def test_events_fold_into_one_reconcile_named_after_the_first_that_asked_for_all_of_it(
    asks: list[tuple[float, str, bool]], expected: list[tuple[str, bool]]
) -> None:
    assert _scheduled(*asks) == expected


async def _until(condition: Any, timeout: float = 30.0) -> None:
    """Yield to the loop until ``condition()`` holds (a test failure after ``timeout``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "the queue never reached the state the test needs"
        await asyncio.sleep(0.01)


def test_status_writes_go_before_queued_child_applies_when_every_thread_is_busy() -> None:
    order: list[str] = []
    started, release = threading.Event(), threading.Event()

    def call(name: str) -> Any:
        def run() -> str:
            if name == "busy":
                started.set()
                release.wait(10)
            order.append(name)
            return name

        return run

    async def scenario() -> list[str]:
        queue = WriteQueue(1)
        tasks = [asyncio.create_task(queue.run(Priority.BACKGROUND, call("busy")))]
        await _until(started.is_set)  # the one thread runs the first call
        for priority, name in [
            (Priority.BACKGROUND, "apply-1"),
            (Priority.BACKGROUND, "apply-2"),
            (Priority.URGENT, "status-1"),
            (Priority.URGENT, "status-2"),
        ]:
            tasks.append(asyncio.create_task(queue.run(priority, call(name))))
        await _until(lambda: queue.waiting() == 4)  # every other call queued behind it
        release.set()
        return list(await asyncio.gather(*tasks))

    results = asyncio.run(scenario())
    assert results == ["busy", "apply-1", "apply-2", "status-1", "status-2"]  # each its own
    assert order == ["busy", "status-1", "status-2", "apply-1", "apply-2"]


def test_child_applies_never_hold_the_threads_kept_for_status_writes() -> None:
    release = threading.Event()
    running: list[str] = []

    def call(name: str) -> Any:
        def run() -> str:
            running.append(name)
            if name.startswith("apply"):
                release.wait(10)
            return name

        return run

    async def scenario() -> list[str]:
        queue = WriteQueue(3, background_slots=2)
        applies = [
            asyncio.create_task(queue.run(Priority.BACKGROUND, call(f"apply-{i}")))
            for i in range(4)
        ]
        await _until(lambda: len(running) == 2 and queue.waiting() == 2)
        # Two applies hold their two threads; the third thread takes the status write at once
        # although two applies were queued before it.
        status = await asyncio.wait_for(queue.run(Priority.URGENT, call("status")), 5)
        assert sorted(running) == ["apply-0", "apply-1", "status"]
        release.set()
        return [status, *await asyncio.gather(*applies)]

    assert asyncio.run(scenario()) == ["status", "apply-0", "apply-1", "apply-2", "apply-3"]
    assert running[-2:] == ["apply-2", "apply-3"]  # the queued applies ran once slots freed


def test_background_slots_must_fit_the_threads() -> None:
    with pytest.raises(ValueError, match=r"background_slots must be 1\.\.4, not 5"):
        WriteQueue(4, background_slots=5)


def test_a_failing_call_raises_in_its_caller_and_the_thread_goes_on() -> None:
    def fail() -> None:
        raise RuntimeError("refused")

    async def scenario() -> str:
        queue = WriteQueue(1)
        with pytest.raises(RuntimeError, match="refused"):
            await queue.run(Priority.URGENT, fail)
        result: str = await queue.run(Priority.URGENT, lambda: "next")
        return result

    assert asyncio.run(scenario()) == "next"


def test_parsed_specs_are_remembered_for_the_objects_reconciled_last_and_forgotten_with_them() -> (
    None
):
    from deepseek_operator.controller.records import PARSED_MEMORY, Records

    records = Records()
    parsed: Any = object()  # what is remembered is opaque to the records
    for i in range(PARSED_MEMORY + 10):
        records.remember_parsed(("llm", f"d{i}"), f"u{i}", 1, parsed)
    assert records.parsed_count() == PARSED_MEMORY
    assert records.parsed(("llm", "d0"), "u0", 1) is None  # the least recently used went
    last = ("llm", f"d{PARSED_MEMORY + 9}")
    assert records.parsed(last, f"u{PARSED_MEMORY + 9}", 1) is parsed
    assert records.parsed(last, f"u{PARSED_MEMORY + 9}", 2) is None  # a new generation
    records.forget(last)
    assert records.parsed(last, f"u{PARSED_MEMORY + 9}", 1) is None
    assert records.parsed_count() == PARSED_MEMORY - 1
