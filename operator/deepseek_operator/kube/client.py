"""The operator's own Kubernetes writes: server-side apply, status patch, delete.

A child is written only where it is absent or ours (controller owner reference to the
DeepSeekServing's uid): one the watches have not shown is read first, so an object of someone
else's in the way is reported (:class:`ForeignObject`), never adopted or fought over.

The requests themselves (credentials, throttling, discovery of REST paths) are
:class:`~deepseek_operator.kube.rest.RestClient`'s; a call blocks, so every call runs in a worker
thread (:class:`WriteQueue`: status writes before child writes). One field manager owns every
field we set; ``force`` takes fields back from hand edits.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from typing import Any

from deepseek_operator.actions import controlled_by, describe_owner
from deepseek_operator.kube.api_errors import (
    TRY_AGAIN_STATUSES,
    ApiError,
    ForeignObject,
    KubeError,
    OwnerGone,
    WriteRefused,
    refusal,
)
from deepseek_operator.kube.credentials import Credentials
from deepseek_operator.kube.encoding import EncodedObject, encode_body
from deepseek_operator.kube.rest import RestClient, group_version_prefix
from deepseek_operator.kube.write_queue import Priority, WriteQueue
from deepseek_operator.names import API_VERSION, FIELD_MANAGER, KIND

__all__ = [
    "TRY_AGAIN_STATUSES",
    "ApiError",
    "EncodedObject",
    "ForeignObject",
    "KubeClient",
    "KubeError",
    "OwnerGone",
    "WriteRefused",
    "controlled_by",
    "describe_owner",
    "encode_body",
    "group_version_prefix",
    "refusal",
]

# Worker threads writing concurrently, and how many of them child applies and deletes may hold
# (the rest are kept for status writes, which users wait for).
WRITER_THREADS = 32
BACKGROUND_WRITERS = 16


class KubeClient(RestClient):
    """The REST transport, the write queue and the operator's calls (each queued, awaitable)."""

    def __init__(self, credentials: Credentials | None = None) -> None:
        # One kept-alive connection per worker thread (the watches have their own, in the
        # watch loop's session).
        super().__init__(credentials, WRITER_THREADS + 1)
        self.queue = WriteQueue(WRITER_THREADS, BACKGROUND_WRITERS)

    def _check_ours(self, obj: EncodedObject, uid: str) -> None:
        """Raise :class:`ForeignObject` when an object of ``obj``'s name exists and ``uid``
        does not control it (one GET; absent is fine)."""
        try:
            existing = self._call("GET", self.object_path(obj), None, "application/json")
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                raise
        else:
            if not controlled_by(existing or {}, uid):
                raise ForeignObject(obj.kind, obj.name, describe_owner(existing or {}))

    async def names_taken(self, objs: list[EncodedObject], uid: str) -> list[str]:
        """The :class:`ForeignObject` messages of ``objs`` whose name an object holds that
        ``uid`` does not control (one GET each, concurrently): a disaggregated pair asks this
        of every name it has not seen before it writes any child."""

        async def check(obj: EncodedObject) -> str | None:
            try:
                await self.queue.run(
                    Priority.BACKGROUND, functools.partial(self._check_ours, obj, uid)
                )
            except ForeignObject as exc:
                return exc.message
            return None

        found = await asyncio.gather(*(check(obj) for obj in objs))
        return [message for message in found if message is not None]

    def _apply(self, obj: EncodedObject, only_if_ours: str | None = None) -> Any:
        path = self.object_path(obj)
        if only_if_ours is not None:
            self._check_ours(obj, only_if_ours)
        return self._call(
            "PATCH",
            path,
            obj,
            "application/apply-patch+yaml",
            [("fieldManager", FIELD_MANAGER), ("force", "true")],
        )

    async def apply(
        self, obj: Mapping[str, Any] | EncodedObject, only_if_ours: str | None = None
    ) -> Any:
        """Server-side apply ``obj`` under our field manager, taking over conflicting fields.

        ``only_if_ours``: a uid; for a child the watches have not shown us, it is read first
        (one GET) and written only if absent or controlled by that uid, else
        :class:`ForeignObject` (a server-side apply would silently adopt an object without
        owner, or be refused forever for one with another controller)."""
        encoded = obj if isinstance(obj, EncodedObject) else EncodedObject.of(obj)
        return await self.queue.run(
            Priority.BACKGROUND, functools.partial(self._apply, encoded, only_if_ours)
        )

    def _apply_status(self, obj: EncodedObject) -> Any:
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        path = self.object_path(obj) + "/status"
        return self._call("PATCH", path, obj, "application/apply-patch+yaml", query)

    async def apply_status(self, obj: Mapping[str, Any]) -> Any:
        """Server-side apply the status of ``obj`` (a Kueue object's: the admission check the
        operator serves); only the fields in ``obj`` become ours."""
        encoded = EncodedObject.of(obj)
        return await self.queue.run(
            Priority.BACKGROUND, functools.partial(self._apply_status, encoded)
        )

    def _delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        path = self.resource(api_version, kind).path(namespace, name)
        try:
            self._call("DELETE", path, {"propagationPolicy": "Foreground"}, "application/json")
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                raise

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Delete a child we no longer render (foreground, so its pods go too)."""
        await self.queue.run(
            Priority.BACKGROUND,
            functools.partial(self._delete, api_version, kind, namespace, name),
        )

    def _patch_status(self, namespace: str, name: str, uid: str, status: dict[str, Any]) -> Any:
        path = self.resource(API_VERSION, KIND).path(namespace, name) + "/status"
        # metadata.uid is a precondition: a deleted object (404) or a new one under the same
        # name (409) is never written for the old one.
        body: dict[str, Any] = {"status": status}
        if uid:
            body["metadata"] = {"uid": uid}
        try:
            return self._call("PATCH", path, body, "application/merge-patch+json")
        except Exception as exc:
            code = getattr(exc, "status", None)
            uid_changed = code in (409, 422) and "uid" in str(getattr(exc, "body", "") or "")
            if code == 404 or uid_changed:
                raise OwnerGone(f"{namespace}/{name}") from None
            raise

    async def patch_status(
        self, namespace: str, name: str, uid: str, status: dict[str, Any]
    ) -> Any:
        """Merge-patch the DeepSeekServing's status subresource (uid as precondition)."""
        return await self.queue.run(
            Priority.URGENT, functools.partial(self._patch_status, namespace, name, uid, status)
        )

    def _check_owner(self, namespace: str, name: str, uid: str) -> None:
        path = self.resource(API_VERSION, KIND).path(namespace, name)
        try:
            live = self._call("GET", path, None, "application/json") or {}
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                raise OwnerGone(f"{namespace}/{name}") from None
            raise
        meta = live.get("metadata") or {}
        if (uid and meta.get("uid") != uid) or meta.get("deletionTimestamp"):
            raise OwnerGone(f"{namespace}/{name}")

    async def check_owner(self, namespace: str, name: str, uid: str) -> None:
        """Raise :class:`OwnerGone` unless the DeepSeekServing ``uid`` still lives (one GET)."""
        await self.queue.run(
            Priority.URGENT, functools.partial(self._check_owner, namespace, name, uid)
        )

    async def get(self, path: str, query: list[tuple[str, str]] | None = None) -> Any:
        """GET ``path`` (JSON), None when absent: the fill's Job, pods and claim."""
        return await self.queue.run(Priority.URGENT, functools.partial(self._get, path, query))

    async def get_text(self, path: str, query: list[tuple[str, str]]) -> str:
        """GET a text subresource (a pod's log)."""
        text: str = await self.queue.run(
            Priority.BACKGROUND, functools.partial(self._get_text, path, query)
        )
        return text

    async def write(
        self, method: str, path: str, body: Any, content_type: str = "application/json"
    ) -> Any:
        """POST or PATCH ``body`` to ``path`` (the fill Job: created once, owners added)."""
        return await self.queue.run(
            Priority.BACKGROUND,
            functools.partial(
                self._call, method, path, body, content_type, [("fieldManager", FIELD_MANAGER)]
            ),
        )

    def _failed_create(self, namespace: str, uid: str) -> list[str]:
        # The StatefulSet controller reports a refused pod only as a core/v1 Event on the
        # StatefulSet (reason FailedCreate, repeated as a count); its status has no condition.
        # The LeaderWorkerSet controller records its own (events.k8s.io, read here as core/v1).
        path = f"/api/v1/namespaces/{namespace}/events"
        selector = f"involvedObject.uid={uid},reason=FailedCreate"
        listed = self._call("GET", path, None, "application/json", [("fieldSelector", selector)])
        events = (listed or {}).get("items") or []

        def when(event: dict[str, Any]) -> str:
            series = event.get("series") or {}
            return str(
                series.get("lastObservedTime")
                or event.get("lastTimestamp")
                or event.get("eventTime")
                or ""
            )

        return [str(e.get("message") or "") for e in sorted(events, key=when, reverse=True)]

    async def failed_create(self, namespace: str, uid: str) -> list[str]:
        """The ``FailedCreate`` Event messages on the object ``uid``, newest first (one LIST)."""
        messages: list[str] = await self.queue.run(
            Priority.URGENT, functools.partial(self._failed_create, namespace, uid)
        )
        return messages
