"""One kind of object → the event loop: a paginated LIST, then a WATCH resumed as client-go does.

Why not kopf (``@kopf.index`` or ``@kopf.on.event``) for what the operator only needs to *know*
(Nodes, our children): kopf gives every indexed object a toggle during its initial listing, and
each object's worker, after dropping its own, waits on one condition that every other object's
drop wakes, so start-up costs O(objects²) wake-ups (2,500 Nodes: 3.1 million; 1,000
DeepSeekServings with their children: a restart took 47 s before a new object was acted on).
Here the listing is read page by page, each object is converted once (``convert``: Node facts, a
trimmed child body), and the operator's loop receives one snapshot, then one call per event.

Every watch of the process runs as a task of one :class:`WatchLoop`: one thread with its own
asyncio loop and one ``aiohttp`` session, however many kinds and namespaces are watched (the
operator's loop is not slowed by reading and converting a 10,000-Node listing). Like client-go's
reflector, a watch:

* resumes from the last resourceVersion it saw when the stream drops or the server ends it
  (bookmarks, asked for, keep that version fresh while nothing of ours changes);
* lists again only when the API server says that version is gone (410 Gone);
* waits as long as a 429's ``Retry-After`` says (API Priority and Fairness), else backs off.

A kind the API server does not serve (an add-on CRD not installed: 404), or that RBAC does not
let the operator list (403), is reported listed and empty, and asked again every
:data:`NOT_SERVED_RETRY_S` seconds or as soon as :meth:`ListWatch.poke` says its CRD came.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any, Generic, TypeVar

from deepseek_operator.kube import metrics
from deepseek_operator.kube.api_errors import retry_after
from deepseek_operator.kube.client import KubeClient

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
    """The API server does not serve this kind (404) or does not let us read it (403)."""


class Throttled(Exception):
    """The API server answered 429: come back after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        super().__init__(f"throttled; retry after {delay} s")


class HttpError(Exception):
    """Any other error answer to a LIST or WATCH."""

    def __init__(self, status: int, text: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {text[:200]}")


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` (``name`` for a cluster-scoped object)."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name', '')}" if namespace else str(meta.get("name", ""))


class WatchLoop:
    """The one thread, asyncio loop and ``aiohttp`` session every watch of the process runs in."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self.loop = asyncio.new_event_loop()
        self._session: Any = None
        # One LIST page read and converted at a time, whichever watch asks: at start-up every
        # watch lists at once, and a page of 500 objects is ~15 MB as Python objects until it
        # is converted.
        self.pages = asyncio.Semaphore(1)
        self._thread = threading.Thread(target=self.loop.run_forever, name="watches", daemon=True)
        self._thread.start()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> concurrent.futures.Future[None]:
        """Run ``coro`` as a task of this loop (from any thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def session(self) -> Any:
        """The ``aiohttp`` session (made on first use, in this loop): no limit on connections,
        as each open watch holds one."""
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, ssl=self.kube.credentials().ssl_context()),
                skip_auto_headers=("User-Agent",),
            )
        return self._session

    async def get(self, path: str, query: list[tuple[str, str]], timeout: Any, verb: str) -> Any:
        """Open ``GET path?query``; the response, or :class:`Throttled` / :class:`WatchExpired`
        / :class:`NotServed` / :class:`HttpError` for an error answer."""
        creds = self.kube.credentials()
        cfg = creds.configuration
        response = await self.session().get(
            creds.server + path,
            params=query,
            headers={"Accept": "application/json", **creds.headers()},
            timeout=timeout,
            proxy=cfg.proxy or None,
            server_hostname=cfg.tls_server_name or None,
        )
        if response.status < 400:
            return response
        text = await response.text()
        response.release()
        if response.status == 429:
            metrics.THROTTLED.labels(verb).inc()
            raise Throttled(retry_after(response.headers.get("Retry-After"), 1.0))
        if response.status == 410:
            raise WatchExpired(text)
        if response.status in (403, 404):
            raise NotServed(text)
        raise HttpError(response.status, text)

    def close(self) -> None:
        """Close the session and stop the loop (from another thread)."""

        async def closing() -> None:
            if self._session is not None:
                await self._session.close()

        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(closing(), self.loop).result(timeout=5)
            self.loop.call_soon_threadsafe(self.loop.stop)


class ListWatch(Generic[T]):
    """Keeps the operator's loop current on one kind: ``on_listed(snapshot)``, then
    ``on_event(type, key, value)``; both run on ``loop`` (the operator's), never in the watch
    loop."""

    def __init__(
        self,
        watches: WatchLoop,
        loop: asyncio.AbstractEventLoop,
        path: str,
        convert: Callable[[dict[str, Any]], T],
        on_listed: OnListed[T],
        on_event: OnEvent[T],
        *,
        label_selector: str = "",
        name: str = "watch",
        kind: str = "",
    ) -> None:
        self.watches = watches
        self.loop = loop
        self.path = path
        self.convert = convert
        self.on_listed = on_listed
        self.on_event = on_event
        self.label_selector = label_selector
        self.name = name
        self.kind = kind or name
        self.version: str | None = None  # the last resourceVersion seen; None: list first
        self._poked: asyncio.Event | None = None
        self._task: concurrent.futures.Future[None] | None = None

    def start(self) -> None:
        """Start listing and watching in the watch loop."""
        self._task = self.watches.spawn(self._run())

    def poke(self) -> None:
        """Ask a kind that was not served again now (its CRD was just installed)."""
        self.watches.loop.call_soon_threadsafe(self._poke)

    def _poke(self) -> None:
        if self._poked is not None:
            self._poked.set()

    def stop(self) -> None:
        """Stop watching (closes the open stream)."""
        if self._task is not None:
            self._task.cancel()

    def _query(self) -> list[tuple[str, str]]:
        return [("labelSelector", self.label_selector)] if self.label_selector else []

    async def _run(self) -> None:
        self._poked = asyncio.Event()
        failures = 0
        while True:
            try:
                if self.version is None:
                    self.version = await self._list()
                await self._watch()
                failures = 0
            except WatchExpired:
                self.version = None  # the one case that lists again
            except NotServed:
                self.version = None
                self.loop.call_soon_threadsafe(self.on_listed, {})
                await self._wait_for_poke()
            except Throttled as exc:
                await asyncio.sleep(exc.delay)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                delay = RETRY_DELAYS_S[min(failures, len(RETRY_DELAYS_S) - 1)]
                failures += 1
                log.warning(
                    "Watch failed; resuming",
                    extra={
                        "watch": self.name,
                        "error": f"{type(exc).__name__}: {exc}".splitlines()[0],
                        "resource_version": self.version,
                        "retry_in_s": delay,
                    },
                )
                await asyncio.sleep(delay)

    async def _wait_for_poke(self) -> None:
        assert self._poked is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._poked.wait(), NOT_SERVED_RETRY_S)
        self._poked.clear()

    async def _list(self) -> str:
        """List every object page by page; hand the snapshot to the loop; its resourceVersion."""
        import aiohttp

        snapshot: dict[str, T] = {}
        token = ""
        while True:
            query = [*self._query(), ("limit", str(PAGE_SIZE))]
            if token:
                query.append(("continue", token))
            try:
                response = await self.watches.get(
                    self.path, query, aiohttp.ClientTimeout(total=60), "list"
                )
            except NotServed:
                log.info(
                    "Not served or not allowed; asking again later", extra={"watch": self.name}
                )
                raise
            # Waiting for an answer holds no slot, only reading and converting its body does;
            # until then a response waits in its socket (aiohttp reads ahead only ~128 KiB).
            async with response, self.watches.pages:
                page = json.loads(await response.read())
                for obj in page.get("items") or []:
                    snapshot[object_key(obj)] = self.convert(obj)
                meta = page.get("metadata") or {}
                del page  # not alive while the next page is read
            token = meta.get("continue") or ""
            if not token:
                metrics.WATCH_LISTS.labels(self.kind).inc()
                self.loop.call_soon_threadsafe(self.on_listed, snapshot)
                return str(meta.get("resourceVersion") or "")

    async def _watch(self) -> None:
        """Stream events from :attr:`version` until the server ends the watch, keeping
        :attr:`version` at the last one seen (a dropped stream resumes from there)."""
        import aiohttp

        query = [
            *self._query(),
            ("watch", "true"),
            ("resourceVersion", str(self.version)),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(WATCH_TIMEOUT_S)),
        ]
        timeout = aiohttp.ClientTimeout(sock_connect=10, sock_read=WATCH_TIMEOUT_S + 30)
        response = await self.watches.get(self.path, query, timeout, "watch")
        async with response:
            async for line in _lines(response):
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise WatchExpired(str(obj.get("message")))
                    if obj.get("code") == 429:
                        raise Throttled(1.0)
                    raise HttpError(int(obj.get("code") or 500), str(obj.get("message")))
                meta = obj.get("metadata") or {}
                if kind != "BOOKMARK":
                    self.loop.call_soon_threadsafe(
                        self.on_event, str(kind), object_key(obj), self.convert(obj)
                    )
                self.version = str(meta.get("resourceVersion") or self.version)


async def _lines(response: Any) -> AsyncIterator[bytes]:
    """The newline-terminated JSON documents of a streaming response (of any length: aiohttp's
    own line reader refuses a line over its buffer size, and a Node can be larger). A partial
    last line, of a dropped stream, is not one."""
    buffer = b""
    async for chunk in response.content.iter_any():
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if line.strip():
                yield line
