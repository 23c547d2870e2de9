"""The benchmark's clock: a watch of every DeepSeekServing that timestamps each resolution.

An object counts as resolved when its ``BackendResolved`` condition is for its current
generation; :class:`ResolvedWatcher` records the first moment it sees that, resuming the watch
when the API server ends it and catching up with a LIST when the version is gone.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from bench.cluster import DSS_PATH
from tests.k8s.cluster import ControlPlane
from tests.k8s.rest import Rest


def resolved_generation(obj: Mapping[str, Any]) -> bool:
    """Whether *obj* has condition BackendResolved for its current ``metadata.generation``."""
    generation = (obj.get("metadata") or {}).get("generation")
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "BackendResolved":
            return bool(cond.get("observedGeneration") == generation)
    return False


class ResolvedWatcher(threading.Thread):
    """Watches every DeepSeekServing from a resourceVersion; timestamps the first resolution.

    ``resolved[(namespace, name)] = (monotonic time, condition status)`` for objects in
    *namespaces*; ``done`` is set once *expected* of them are resolved.
    """

    def __init__(self, cp: ControlPlane, namespaces: Iterable[str], expected: int) -> None:
        """Prepare the watch (a LIST for the starting resourceVersion, before measuring)."""
        super().__init__(daemon=True, name="dss-watch")
        self.rest = Rest(cp)
        self.namespaces = set(namespaces)
        self.expected = expected
        self.resolved: dict[tuple[str, str], tuple[float, str]] = {}
        self.done = threading.Event()
        self.changed = threading.Condition()
        self.connected = threading.Event()
        self.error: BaseException | None = None
        self.stopping = False
        listing = self.rest.call("GET", f"{DSS_PATH}?limit=1")
        self.resource_version = listing["metadata"]["resourceVersion"]
        self.conn: http.client.HTTPSConnection | None = self.rest.connection(timeout=None)
        self.catch_ups = 0

    def run(self) -> None:
        """Stream events until stopped; record each object's first resolved moment.

        The API server ends a watch whose reader falls behind (a busy 2-core machine during a
        burst): the watch is resumed from the last version seen; if that version is gone, a
        LIST catches up (those objects are timestamped when the LIST answers: late, never early).
        """
        try:
            while not self.stopping and len(self.resolved) < self.expected:
                if self.conn is None:
                    self.conn = self.rest.connection(timeout=None)
                resp = self.rest.send(
                    self.conn,
                    "GET",
                    f"{DSS_PATH}?watch=true&resourceVersion={self.resource_version}"
                    "&allowWatchBookmarks=true&timeoutSeconds=1800",
                )
                if resp.status == 410:
                    resp.read()
                    self.catch_up()
                    continue
                if resp.status != 200:
                    raise RuntimeError(f"watch: {resp.status} {resp.read()[:500]!r}")
                self.connected.set()
                event: dict[str, Any] = {}
                for line in resp:
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        break  # expired: the next request answers 410 or resumes
                    self.resource_version = (obj.get("metadata") or {}).get(
                        "resourceVersion", self.resource_version
                    )
                    if event.get("type") not in ("BOOKMARK", "DELETED"):
                        self.observe(obj, time.monotonic())
                if event.get("type") == "ERROR":
                    self.catch_up()
                self.conn.close()
                self.conn = None
        except BaseException as exc:  # reported by the phase
            if not self.stopping:
                self.error = exc
        finally:
            self.done.set()

    def observe(self, obj: Mapping[str, Any], now: float) -> None:
        """Record *obj*'s resolution at *now* if it is the first one seen."""
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace"), meta.get("name"))
        if key[0] not in self.namespaces or key in self.resolved or not resolved_generation(obj):
            return
        status = next(
            c.get("status")
            for c in obj["status"]["conditions"]
            if c.get("type") == "BackendResolved"
        )
        with self.changed:
            self.resolved[key] = (now, str(status))
            self.changed.notify_all()
        if len(self.resolved) >= self.expected:
            self.done.set()

    def catch_up(self) -> None:
        """LIST every DeepSeekServing; record the resolved ones; resume from the list."""
        self.catch_ups += 1
        listing = self.rest.call("GET", DSS_PATH)
        now = time.monotonic()
        for obj in listing.get("items") or []:
            self.observe(obj, now)
        self.resource_version = listing["metadata"]["resourceVersion"]

    def wait_for(self, key: tuple[str, str], timeout: float) -> bool:
        """Block until *key* is resolved (True) or *timeout* seconds pass (False)."""
        with self.changed:
            return (
                self.changed.wait_for(
                    lambda: key in self.resolved or self.error is not None, timeout
                )
                and key in self.resolved
            )

    def stop(self) -> None:
        """Close the stream."""
        self.stopping = True
        conn = self.conn
        if conn is None:
            return
        with contextlib.suppress(OSError):
            if conn.sock is not None:
                conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
