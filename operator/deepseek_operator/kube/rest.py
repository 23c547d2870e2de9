"""The REST transport under the operator's writes: requests, throttling, discovery.

Requests go out through the ``kubernetes`` client's ``urllib3`` pool with the credentials of
:mod:`deepseek_operator.kube.credentials`; bodies go out as the JSON bytes
:func:`~deepseek_operator.kube.encoding.encode_body` makes. A 429 (API Priority and Fairness) is
sent again after the wait its ``Retry-After`` asks for, at most :data:`THROTTLED_RETRIES` times.
REST paths come from the API server's discovery (one ``GET`` per API group version, cached for
the life of the process), so a new child kind needs no hand-written path. Every call blocks:
:class:`~deepseek_operator.kube.client.KubeClient` runs them in its worker threads.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deepseek_operator.kube import metrics
from deepseek_operator.kube.api_errors import ApiError, KubeError, retry_after
from deepseek_operator.kube.credentials import Credentials, load_credentials
from deepseek_operator.kube.encoding import EncodedObject, encode_body

# How often a request answered 429 is sent again (after the Retry-After wait) in its thread.
THROTTLED_RETRIES = 4


@dataclass(frozen=True)
class Resource:
    """Where the API server serves one kind: its group-version prefix and plural name."""

    prefix: str  # /api/v1 or /apis/<group>/<version>
    plural: str
    namespaced: bool

    def path(self, namespace: str, name: str) -> str:
        """REST path of one object of this kind."""
        scope = f"/namespaces/{namespace}" if self.namespaced else ""
        return f"{self.prefix}{scope}/{self.plural}/{name}"


def group_version_prefix(api_version: str) -> str:
    """``/api/v1`` for the core group, ``/apis/<group>/<version>`` otherwise."""
    return "/api/v1" if api_version == "v1" else f"/apis/{api_version}"


class RestClient:
    """A thread-safe holder of the connection pool and the resource table; blocking calls."""

    def __init__(self, credentials: Credentials | None, pool_size: int) -> None:
        self.pool_size = pool_size  # kept-alive connections: one per thread that calls
        self._credentials = credentials  # None: loaded on first use (in-cluster or kubeconfig)
        self._pool: Any = None
        self._lock = threading.Lock()
        self._resources: dict[tuple[str, str], Resource] = {}

    def credentials(self) -> Credentials:
        """Where the API server is and how to authenticate (loaded once)."""
        with self._lock:
            if self._credentials is None:
                self._credentials = load_credentials()
            return self._credentials

    def _connections(self) -> tuple[Credentials, Any]:
        """The credentials and the connection pool made from them (made once)."""
        credentials = self.credentials()
        with self._lock:
            if self._pool is None:
                self._pool = credentials.pool_manager(self.pool_size)
            return credentials, self._pool

    def _request(
        self,
        method: str,
        path: str,
        body: Any,
        content_type: str,
        query: list[tuple[str, str]] | None,
        timeout: float | tuple[float, float],
    ) -> Any:
        """Send one request; the ``urllib3`` response with its body still unread (the body goes
        out as the JSON bytes :func:`encode_body` makes)."""
        import urllib3

        credentials, pool = self._connections()
        url = credentials.server + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        headers.update(credentials.headers())
        data = None if body is None else encode_body(body)
        if isinstance(timeout, tuple):
            limits = urllib3.Timeout(connect=timeout[0], read=timeout[1])
        else:
            limits = urllib3.Timeout(total=timeout)
        return pool.request(
            method, url, body=data, headers=headers, timeout=limits, preload_content=False
        )

    def _read(self, response: Any) -> Any:
        """The decoded JSON body of ``response``; :class:`ApiError` for an HTTP error."""
        data = response.read()
        if response.status >= 400:
            raise ApiError(response.status, str(response.reason or ""), data)
        return json.loads(data or b"null")

    def _call(
        self,
        method: str,
        path: str,
        body: Any,
        content_type: str,
        query: list[tuple[str, str]] | None = None,
    ) -> Any:
        metrics.API_REQUESTS.labels(method).inc()
        for attempt in range(THROTTLED_RETRIES + 1):
            response = self._request(method, path, body, content_type, query, 30)
            if response.status != 429 or attempt == THROTTLED_RETRIES:
                break
            # API Priority and Fairness turned it away: wait as it asks, then again (a few
            # times; after that the 429 is the reconcile's to retry with its back-off).
            metrics.THROTTLED.labels(method).inc()
            response.drain_conn()
            response.release_conn()
            time.sleep(retry_after(response.headers.get("Retry-After"), 2.0**attempt))
        return self._read(response)

    def resource(self, api_version: str, kind: str) -> Resource:
        """Where ``kind`` of ``api_version`` is served, from discovery (cached)."""
        key = (api_version, kind)
        with self._lock:
            known = self._resources.get(key)
        if known is not None:
            return known
        prefix = group_version_prefix(api_version)
        listing = self._call("GET", prefix, None, "application/json") or {}
        found: dict[tuple[str, str], Resource] = {}
        for entry in listing.get("resources") or []:
            if "/" in str(entry.get("name", "")):  # a subresource such as deployments/status
                continue
            found[(api_version, str(entry.get("kind")))] = Resource(
                prefix, str(entry["name"]), bool(entry.get("namespaced", True))
            )
        with self._lock:
            self._resources.update(found)
        if key not in found:
            raise KubeError(f"the API server does not serve kind {kind} in {api_version}")
        return found[key]

    def forget_resources(self) -> None:
        """Drop the discovery cache (kinds come and go with their CRDs)."""
        with self._lock:
            self._resources.clear()

    def served(self, api_version: str, kind: str) -> bool:
        """Whether the API server serves ``kind`` of ``api_version`` (asks discovery again when
        it was not known to, so an add-on installed later is seen)."""
        try:
            self.resource(api_version, kind)
        except KubeError:
            return False
        except Exception as exc:
            if getattr(exc, "status", None) == 404:  # the whole group-version is absent
                return False
            raise
        return True

    def object_path(self, obj: Mapping[str, Any] | EncodedObject) -> str:
        """REST path of a child object."""
        if not isinstance(obj, EncodedObject):
            obj = EncodedObject.of(obj)
        return self.resource(obj.api_version, obj.kind).path(obj.namespace, obj.name)

    def _get(self, path: str, query: list[tuple[str, str]] | None = None) -> Any:
        """GET ``path`` as JSON; None when it is absent (404)."""
        try:
            return self._call("GET", path, None, "application/json", query)
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise

    def _get_text(self, path: str, query: list[tuple[str, str]]) -> str:
        metrics.API_REQUESTS.labels("GET").inc()
        response = self._request("GET", path, None, "application/json", query, 30)
        data = response.read()
        if response.status >= 400:
            raise ApiError(response.status, str(response.reason or ""), data)
        return bytes(data).decode("utf-8", "replace")
