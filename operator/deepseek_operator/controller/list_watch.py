"""One kind of object → the event loop: one paginated LIST, then a WATCH, in a thread.

Why not kopf (``@kopf.index`` or ``@kopf.on.event``) for what the operator only needs to *know*
(Nodes, our children): kopf gives every indexed object a toggle during its initial listing, and
each object's worker, after dropping its own, waits on one condition that every other object's
drop wakes, so start-up costs O(objects²) wake-ups (2,500 Nodes: 3.1 million; 1,000
DeepSeekServings with their children: a restart took 47 s before a new object was acted on).
kopf also runs a worker, a diff and its handler machinery per object and event. Here the listing
is read page by page, each object is converted once in this thread (``convert``: Node facts, a
trimmed child body), and the loop receives one snapshot, then one call per watch event: start-up
is linear in objects and an event costs what its callback does.

The watch resumes from the last resourceVersion it saw (bookmarks keep it fresh); when the API
server says that version is gone (410), or the stream fails, the objects are listed again and
the loop receives the new snapshot. One LIST per start or expiry, never one per reconcile. A kind
the API server does not serve (an add-on CRD not installed: 404), or that RBAC does not let the
operator list (403), is reported listed and empty, and asked again every :data:`NOT_SERVED_RETRY_S` seconds or as soon as :meth:`ListWatch.poke`
says its CRD came.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from deepseek_operator.controller.kube import KubeClient

log = logging.getLogger("deepseek_operator.controller")

PAGE_SIZE = 500
WATCH_TIMEOUT_S = 300  # the server ends a watch after this; we resume from the last version
RETRY_DELAYS_S = (0.5, 1, 2, 5, 10, 30)
NOT_SERVED_RETRY_S = 10.0

T = TypeVar("T")
OnListed = Callable[[dict[str, T]], None]  # key -> converted object
OnEvent = Callable[[str, str, T], None]  # (ADDED | MODIFIED | DELETED, key, converted object)


class WatchExpired(Exception):
    """The API server no longer has the resourceVersion the watch resumes from (410 Gone)."""


class NotServed(Exception):
    """The API server does not serve this kind (404): its CRD is not installed."""


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` (``name`` for a cluster-scoped object)."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name', '')}" if namespace else str(meta.get("name", ""))


def _lines(response: Any) -> Iterator[bytes]:
    """The newline-separated JSON documents of a streaming response."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        yield from (line for line in complete if line.strip())
    if buffer.strip():
        yield buffer


class ListWatch(Generic[T]):
    """Keeps the loop current on one kind: ``on_listed(snapshot)``, then ``on_event(type, key,
    value)``; both run on the event loop (never in this thread)."""

    def __init__(
        self,
        kube: KubeClient,
        loop: asyncio.AbstractEventLoop,
        path: str,
        convert: Callable[[dict[str, Any]], T],
        on_listed: OnListed[T],
        on_event: OnEvent[T],
        *,
        label_selector: str = "",
        name: str = "watch",
    ) -> None:
        self.kube = kube
        self.loop = loop
        self.path = path
        self.convert = convert
        self.on_listed = on_listed
        self.on_event = on_event
        self.label_selector = label_selector
        self.name = name
        self._stop = threading.Event()
        self._poked = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start listing and watching in the background."""
        self._thread.start()

    def poke(self) -> None:
        """Ask a kind that was not served again now (its CRD was just installed)."""
        self._poked.set()

    def stop(self) -> None:
        """Stop watching (closes the open stream)."""
        self._stop.set()
        self._poked.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):
                response.shutdown()
            with contextlib.suppress(Exception):
                response.release_conn()

    def _query(self) -> list[tuple[str, str]]:
        return [("labelSelector", self.label_selector)] if self.label_selector else []

    def _run(self) -> None:
        failures = 0
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._list()
                version = self._watch(version)
                failures = 0
            except WatchExpired:
                version = None  # list again
            except NotServed:
                version = None
                self._poked.wait(NOT_SERVED_RETRY_S)
                self._poked.clear()
            except Exception as exc:
                if self._stop.is_set():
                    return
                delay = RETRY_DELAYS_S[min(failures, len(RETRY_DELAYS_S) - 1)]
                failures += 1
                log.warning(
                    "Watch failed; listing again",
                    extra={
                        "watch": self.name,
                        "error": f"{type(exc).__name__}: {exc}",
                        "retry_in_s": delay,
                    },
                )
                version = None
                self._stop.wait(delay)

    def _list(self) -> str:
        """List every object page by page; hand the snapshot to the loop; its resourceVersion."""
        snapshot: dict[str, T] = {}
        token = ""
        while True:
            query = [*self._query(), ("limit", str(PAGE_SIZE))]
            if token:
                query.append(("continue", token))
            try:
                page = self.kube.list_page(self.path, query)
            except Exception as exc:
                status = getattr(exc, "status", None)
                if status in (403, 404):
                    # Not served (404), or not ours to read (403: RBAC without this kind, as
                    # kopf, which skips such a resource with a warning): nothing to know.
                    if status == 403:
                        log.warning(
                            "Not allowed to list; asking again later", extra={"watch": self.name}
                        )
                    self.loop.call_soon_threadsafe(self.on_listed, {})
                    raise NotServed(self.path) from None
                raise
            for obj in page.get("items") or []:
                snapshot[object_key(obj)] = self.convert(obj)
            meta = page.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                self.loop.call_soon_threadsafe(self.on_listed, snapshot)
                return str(meta.get("resourceVersion") or "")

    def _watch(self, version: str) -> str:
        """Stream events from ``version`` until the server ends the watch; the last version."""
        query = [
            *self._query(),
            ("resourceVersion", version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(WATCH_TIMEOUT_S)),
        ]
        self._response = self.kube.open_watch(self.path, query, WATCH_TIMEOUT_S + 30)
        try:
            for line in _lines(self._response):
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise WatchExpired(str(obj.get("message")))
                    raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
                meta = obj.get("metadata") or {}
                version = str(meta.get("resourceVersion") or version)
                if kind == "BOOKMARK":
                    continue
                self.loop.call_soon_threadsafe(
                    self.on_event, str(kind), object_key(obj), self.convert(obj)
                )
        finally:
            self._response.release_conn()
            self._response = None
        return version
