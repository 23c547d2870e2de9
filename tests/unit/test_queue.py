"""The reconcile queue alone (no kopf, no operator state): delay, fold, follow-ups, cancel."""

from __future__ import annotations

import asyncio
import pathlib

from deepseek_operator.actions import BACKOFF_TRIGGER, FollowUp
from deepseek_operator.controller.queue import ReconcileQueue
from deepseek_operator.controller.records import Records

KEY = ("llm", "a")
CONTROLLER = pathlib.Path(__file__).resolve().parents[2] / "operator/deepseek_operator/controller"


def _ran(script: object, wait: float = 0.3) -> tuple[list[tuple[str, bool]], int]:
    ran: list[tuple[str, bool]] = []

    async def scenario() -> int:
        async def run(key: tuple[str, str], trigger: str, status_only: bool) -> None:
            ran.append((trigger, status_only))

        records = Records()
        for key in (KEY, ("llm", "b")):
            records.ensure(key)  # a reconcile is kept on its object's record
        queue = ReconcileQueue(run, records)
        script(queue)  # type: ignore[operator]
        await asyncio.sleep(wait)
        return len(queue)

    left = asyncio.run(scenario())
    return ran, left


def test_events_fold_and_a_full_ask_widens_a_status_only_one() -> None:
    def script(q: ReconcileQueue) -> None:
        q.schedule(KEY, 0.05, "pods", status_only=True)
        q.schedule(KEY, 0.05, "pods", status_only=True)
        q.schedule(KEY, 0.2, "nodes")

    assert _ran(script) == ([("nodes", False)], 0)


def test_a_sooner_event_brings_the_reconcile_forward_and_follow_ups_yield_their_name() -> None:
    def script(q: ReconcileQueue) -> None:
        q.follow_up(KEY, [FollowUp(5.0, BACKOFF_TRIGGER)])
        q.schedule(KEY, 0.01, "child")

    assert _ran(script) == ([("child", False)], 0)


def test_a_cancelled_reconcile_never_runs_and_leaves_nothing() -> None:
    def script(q: ReconcileQueue) -> None:
        q.schedule(KEY, 0.05, "nodes")
        q.retry_after_error(("llm", "b"), status_only=False)
        q.cancel(KEY)
        q.cancel(("llm", "b"))

    assert _ran(script) == ([], 0)


def test_an_object_without_a_record_has_nothing_to_reconcile() -> None:
    async def scenario() -> int:
        async def run(key: tuple[str, str], trigger: str, status_only: bool) -> None:
            raise AssertionError("ran")

        queue = ReconcileQueue(run, Records())
        queue.schedule(KEY, 0.0, "nodes")
        await asyncio.sleep(0.05)
        return len(queue)

    assert asyncio.run(scenario()) == 0


def test_the_kopf_wiring_is_under_200_lines() -> None:
    # (No module of the package is over 400 lines: tests/unit/test_layers.py.)
    assert len((CONTROLLER / "wiring.py").read_text().splitlines()) < 200


def test_handlers_are_registered_on_an_explicit_registry_not_on_import() -> None:
    import kopf

    from deepseek_operator.controller import wiring

    ours = {"configure", "stop_watching", "serving_event", "addon_crd_changed"}
    default = kopf.get_default_registry()
    registered = [*default._watching.get_all_handlers(), *default._activities.get_all_handlers()]
    assert not ours & {h.fn.__name__ for h in registered}  # importing registered nothing
    reg = wiring.registry()
    watched = {h.fn.__name__ for h in reg._watching.get_all_handlers()}
    assert watched == {"serving_event", "addon_crd_changed"}
    activities = {h.fn.__name__ for h in reg._activities.get_all_handlers()}
    assert activities == {"configure", "stop_watching", "login"}
