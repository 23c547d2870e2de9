"""The operator's API calls, run by a fixed set of threads, the urgent ones first.

A request blocks (``urllib3``), so every call runs in a thread. In a burst of creates the
calls outnumber the threads; a plain thread pool runs them in arrival order, so an object's
``BackendResolved`` status waits behind the child applies of every object before it. Here a
status write (and the owner check or Event read that decides one) goes before any queued child
apply or delete; calls of one priority keep their order. Background calls hold at most
``background_slots`` of the threads, so a status write never waits for a thread while child
applies (each slow under load) hold them all; an urgent call is taken by a free thread at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import threading
from collections.abc import Callable
from enum import IntEnum
from typing import Any


class Priority(IntEnum):
    """Which calls go first when the threads are busy (lower first)."""

    URGENT = 0  # status writes and the reads that decide them: what a user waits to see
    BACKGROUND = 1  # child applies and deletes


_Item = tuple[int, int, Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


class WriteQueue:
    """Up to ``slots`` threads running queued calls, urgent ones first; background calls in at
    most ``background_slots`` of them at a time (default: all)."""

    def __init__(self, slots: int, background_slots: int | None = None) -> None:
        self.slots = slots
        self.background_slots = slots if background_slots is None else background_slots
        if not 1 <= self.background_slots <= slots:
            raise ValueError(f"background_slots must be 1..{slots}, not {background_slots}")
        self._heap: list[_Item] = []
        self._order = itertools.count()
        self._ready = threading.Condition()
        self._threads = 0
        self._idle = 0
        self._background = 0  # background calls running

    async def run(self, priority: Priority, call: Callable[[], Any]) -> Any:
        """Run ``call`` in one of the threads, after every queued call of a higher priority;
        its result (or its exception)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._ready:
            heapq.heappush(self._heap, (int(priority), next(self._order), call, loop, future))
            if self._idle == 0 and self._threads < self.slots:
                self._threads += 1
                threading.Thread(target=self._work, name="kube-writer", daemon=True).start()
            else:
                self._ready.notify()
        return await future

    def waiting(self) -> int:
        """Calls queued and not yet taken by a thread."""
        with self._ready:
            return len(self._heap)

    def _runnable(self) -> bool:
        # The heap's first call is urgent whenever any urgent call is queued.
        if not self._heap:
            return False
        return self._heap[0][0] == Priority.URGENT or self._background < self.background_slots

    def _work(self) -> None:
        while True:
            with self._ready:
                self._idle += 1
                while not self._runnable():
                    self._ready.wait()
                self._idle -= 1
                priority, _order, call, loop, future = heapq.heappop(self._heap)
                background = priority == Priority.BACKGROUND
                if background:
                    self._background += 1
            try:
                result = call()
            except BaseException as exc:  # handed to the awaiting coroutine, which decides
                _settle(loop, future, None, exc)
            else:
                _settle(loop, future, result, None)
            if background:
                with self._ready:
                    self._background -= 1
                    if self._heap:  # a background call may have waited for this slot
                        self._ready.notify()


def _settle(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: Any,
    error: BaseException | None,
) -> None:
    def settle() -> None:
        if future.done():  # the awaiting task was cancelled meanwhile
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    # The loop may have closed (the operator shutting down): then nobody waits any more.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(settle)
