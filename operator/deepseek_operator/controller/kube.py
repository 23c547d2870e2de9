"""The operator's own Kubernetes writes: server-side apply, status patch, delete.

The ``kubernetes`` client is synchronous, so every call runs in a worker thread. One field
manager owns every field we set; ``force`` takes fields back from hand edits.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from deepseek_operator.controller import metrics
from deepseek_operator.names import API_VERSION, FIELD_MANAGER, PLURAL

_PLURALS = {
    ("v1", "Service"): ("/api/v1", "services"),
    ("apps/v1", "Deployment"): ("/apis/apps/v1", "deployments"),
    ("apps/v1", "StatefulSet"): ("/apis/apps/v1", "statefulsets"),
}
DSS_PREFIX = f"/apis/{API_VERSION}"


class KubeClient:
    """A thread-safe holder of one ``kubernetes.client.ApiClient`` and the calls we make."""

    def __init__(self) -> None:
        self._api: Any = None
        self._lock = threading.Lock()

    def _client(self) -> Any:
        with self._lock:
            if self._api is None:
                from kubernetes import client, config

                try:
                    config.load_incluster_config()  # type: ignore[no-untyped-call]
                except config.ConfigException:
                    config.load_kube_config()  # type: ignore[no-untyped-call]
                self._api = client.ApiClient()
            return self._api

    def _call(
        self,
        method: str,
        path: str,
        body: Any,
        content_type: str,
        query: list[tuple[str, str]] | None = None,
    ) -> Any:
        from kubernetes.client.exceptions import ApiException

        metrics.API_REQUESTS.labels(method).inc()
        api = self._client()
        method_, url, headers, data, post = api.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = api.call_api(
            method_, url, header_params=headers, body=data, post_params=post, _request_timeout=30
        )
        response.read()
        if response.status >= 400:
            raise ApiException(status=response.status, reason=response.reason, body=response.data)
        return json.loads(response.data or b"null")

    @staticmethod
    def object_path(obj: dict[str, Any]) -> str:
        """REST path of a namespaced child object."""
        prefix, plural = _PLURALS[(obj["apiVersion"], obj["kind"])]
        meta = obj["metadata"]
        return f"{prefix}/namespaces/{meta['namespace']}/{plural}/{meta['name']}"

    async def apply(self, obj: dict[str, Any]) -> Any:
        """Server-side apply ``obj`` under our field manager, taking over conflicting fields."""
        return await asyncio.to_thread(
            self._call,
            "PATCH",
            self.object_path(obj),
            obj,
            "application/apply-patch+yaml",
            [("fieldManager", FIELD_MANAGER), ("force", "true")],
        )

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Delete a child we no longer render (foreground, so its pods go too)."""
        prefix, plural = _PLURALS[(api_version, kind)]
        path = f"{prefix}/namespaces/{namespace}/{plural}/{name}"
        try:
            await asyncio.to_thread(
                self._call, "DELETE", path, {"propagationPolicy": "Foreground"}, "application/json"
            )
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                raise

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> Any:
        """Merge-patch the DeepSeekServing's status subresource."""
        path = f"{DSS_PREFIX}/namespaces/{namespace}/{PLURAL}/{name}/status"
        return await asyncio.to_thread(
            self._call, "PATCH", path, {"status": status}, "application/merge-patch+json"
        )
