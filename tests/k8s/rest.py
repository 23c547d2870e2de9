"""A minimal JSON REST client of a test control plane's API server, for bulk work.

The generated ``kubernetes`` client (:meth:`tests.k8s.cluster.ControlPlane.api_client`) validates
models: too slow and too strict for thousands of writes of partial Node statuses, and for the
benchmark's watch streams. :class:`Rest` speaks plain JSON over one keep-alive HTTPS connection
per thread, with the control plane's admin token.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from typing import Any

from tests.k8s.cluster import ControlPlane


class Rest:
    """A minimal JSON REST client of the API server (admin token), one keep-alive connection
    per thread. (The generated ``kubernetes`` client validates models, too slow and too strict
    for bulk writes of partial Node statuses.)"""

    def __init__(self, cp: ControlPlane) -> None:
        """Connect to *cp*'s API server on first use in each thread."""
        self.host, self.port = cp.server.removeprefix("https://").rsplit(":", 1)
        self.token = cp.token
        self.ctx = ssl.create_default_context(cafile=str(cp.ca_file))
        self.local = threading.local()

    def connection(self, timeout: float | None = 60.0) -> http.client.HTTPSConnection:
        """A new HTTPS connection to the API server."""
        return http.client.HTTPSConnection(
            self.host, int(self.port), context=self.ctx, timeout=timeout
        )

    def send(
        self, conn: http.client.HTTPSConnection, method: str, path: str, body: Any = None
    ) -> http.client.HTTPResponse:
        """Send one request on *conn* and return the (unread) response."""
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = (
                "application/merge-patch+json" if method == "PATCH" else "application/json"
            )
        conn.request(method, path, body=data, headers=headers)
        return conn.getresponse()

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """One request on this thread's connection; the parsed JSON answer (raises on >= 400)."""
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = self.connection()
        resp = self.send(conn, method, path, body)
        data = resp.read()
        if resp.status >= 400:
            raise RuntimeError(f"{method} {path}: {resp.status} {data[:500]!r}")
        return json.loads(data or b"null")
