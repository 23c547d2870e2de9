"""The reconcile queue: delay, fold, follow-ups and back-off (no kopf; unit-tested alone).

Every event that asks for a reconcile names a delay (a debounce) and a trigger. Events arriving
while a reconcile waits fold into it: it writes children unless every event that asked for it
wanted the status only (pod events), and it is named after the first event that asked for all
it will do. An event due sooner brings the pending reconcile forward. A pending reconcile leaves
the queue as it starts, so the queue holds nothing for an object with no reconcile waiting.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from deepseek_operator.actions import BACKOFF_TRIGGER, RECHECK_TRIGGER, FollowUp
from deepseek_operator.controller.records import ServingKey

# A failed scheduled reconcile may see no watch event again (e.g. a new CRD whose REST path
# discovery did not list yet): it is tried again after this long, as kopf does for handlers.
BACKOFF_AFTER_ERROR_S = 10.0
RETRY_TRIGGER = "retry"
# Triggers that only follow up on an earlier reconcile: a watch event folded into a pending
# follow-up names the reconcile instead (metrics and logs say why it ran).
FOLLOW_UPS = frozenset({RECHECK_TRIGGER, BACKOFF_TRIGGER, RETRY_TRIGGER})

Run = Callable[[ServingKey, str, bool], Awaitable[None]]
"""Runs one reconcile: (key, trigger, status_only)."""


@dataclass
class PendingReconcile:
    """A reconcile waiting for its time: the task, when it is due (loop time), why, and
    whether it may write children (False: every event that asked wanted the status only)."""

    task: asyncio.Task[None]
    due: float
    trigger: str
    full: bool


class ReconcileQueue:
    """At most one pending reconcile per DeepSeekServing."""

    def __init__(
        self, run: Run, context: Callable[[], contextvars.Context | None] = lambda: None
    ) -> None:
        self._run = run
        # The context a reconcile runs in (kopf's, so posting Events works), or None.
        self._context = context
        self.pending: dict[ServingKey, PendingReconcile] = {}

    def __len__(self) -> int:
        return len(self.pending)

    def schedule(
        self, key: ServingKey, delay: float, trigger: str, status_only: bool = False
    ) -> None:
        """Reconcile ``key`` in ``delay`` seconds, folding into a pending reconcile."""
        full = not status_only
        due = asyncio.get_running_loop().time() + delay
        pending = self.pending.get(key)
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
            record = self.pending.pop(key)
            await self._run(key, record.trigger, not record.full)

        context = self._context()
        task = asyncio.create_task(later(), context=context.copy() if context else None)
        self.pending[key] = PendingReconcile(task, due, trigger, full)

    def follow_up(self, key: ServingKey, follow_ups: Iterable[FollowUp]) -> None:
        """Schedule what a reconcile's outcome asks for (see :func:`actions.follow_ups`)."""
        for item in follow_ups:
            self.schedule(key, item.delay, item.trigger)

    def retry_after_error(self, key: ServingKey, status_only: bool) -> None:
        """A reconcile failed (an outage, a surprise): try again later."""
        self.schedule(key, BACKOFF_AFTER_ERROR_S, RETRY_TRIGGER, status_only=status_only)

    def cancel(self, key: ServingKey) -> None:
        """Drop ``key``'s pending reconcile (its object is gone)."""
        pending = self.pending.pop(key, None)
        if pending is not None and not pending.task.done():
            pending.task.cancel()
