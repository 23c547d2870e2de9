"""The reconcile queue: delay, fold, follow-ups and back-off (no kopf; unit-tested alone).

Every event that asks for a reconcile names a delay (a debounce) and a trigger. Events arriving
while a reconcile waits fold into it: it writes children unless every event that asked for it
wanted the status only (pod events), and it is named after the first event that asked for all
it will do. An event due sooner brings the pending reconcile forward. The pending reconcile is
kept on the object's record and leaves it as it starts; an object without a record (deleted,
never seen) has nothing to reconcile.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Iterable

from deepseek_operator.actions import BACKOFF_TRIGGER, RECHECK_TRIGGER, FollowUp
from deepseek_operator.actions.owned import ServingKey
from deepseek_operator.controller.records import PendingReconcile, Records

# A failed scheduled reconcile may see no watch event again (e.g. a new CRD whose REST path
# discovery did not list yet): it is tried again after this long, as kopf does for handlers.
BACKOFF_AFTER_ERROR_S = 10.0
RETRY_TRIGGER = "retry"
# Triggers that only follow up on an earlier reconcile: a watch event folded into a pending
# follow-up names the reconcile instead (metrics and logs say why it ran).
FOLLOW_UPS = frozenset({RECHECK_TRIGGER, BACKOFF_TRIGGER, RETRY_TRIGGER})

Run = Callable[[ServingKey, str, bool], Awaitable[None]]
"""Runs one reconcile: (key, trigger, status_only)."""


class ReconcileQueue:
    """At most one pending reconcile per DeepSeekServing."""

    def __init__(
        self,
        run: Run,
        records: Records,
        context: Callable[[], contextvars.Context | None] = lambda: None,
    ) -> None:
        self._run = run
        self._records = records  # each one holds its object's pending reconcile
        # The context a reconcile runs in (kopf's, so posting Events works), or None.
        self._context = context

    def __len__(self) -> int:
        return sum(rec.pending is not None for _key, rec in self._records.items())

    def schedule(
        self, key: ServingKey, delay: float, trigger: str, status_only: bool = False
    ) -> None:
        """Reconcile ``key`` in ``delay`` seconds, folding into a pending reconcile."""
        rec = self._records.get(key)
        if rec is None:
            return
        full = not status_only
        due = asyncio.get_running_loop().time() + delay
        pending = rec.pending
        if pending is not None and not pending.task.done():
            # The reconcile is named after the first event that asked for all it will do: a
            # follow-up, or a status-only ask that a full one widens, yields its name.
            widens = full and not pending.full
            if widens or (pending.trigger in FOLLOW_UPS and trigger not in FOLLOW_UPS):
                pending.trigger = trigger
            pending.full = pending.full or full
            if due >= pending.due:
                return
            pending.task.cancel()  # still asleep (a running one has left ``pending``)
            trigger, full = pending.trigger, pending.full

        async def later() -> None:
            await asyncio.sleep(delay)
            now = self._records.get(key)  # (a replaced object's record took it over)
            if now is not None and now.pending is mine:
                now.pending = None
            await self._run(key, mine.trigger, not mine.full)

        context = self._context()
        task = asyncio.create_task(later(), context=context.copy() if context else None)
        mine = rec.pending = PendingReconcile(task, due, trigger, full)

    def follow_up(self, key: ServingKey, follow_ups: Iterable[FollowUp]) -> None:
        """Schedule what a reconcile's outcome asks for (see :func:`actions.follow_ups`)."""
        for item in follow_ups:
            self.schedule(key, item.delay, item.trigger)

    def retry_after_error(self, key: ServingKey, status_only: bool) -> None:
        """A reconcile failed (an outage, a surprise): try again later."""
        self.schedule(key, BACKOFF_AFTER_ERROR_S, RETRY_TRIGGER, status_only=status_only)

    def cancel(self, key: ServingKey) -> None:
        """Drop ``key``'s pending reconcile (its object is gone)."""
        rec = self._records.get(key)
        if rec is not None and rec.pending is not None:
            rec.pending.task.cancel()  # (nothing happens to one already running)
            rec.pending = None
