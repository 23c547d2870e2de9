"""A controller-runtime manager's webhooks served by URL on loopback, with a test CA.

LWS (:mod:`tests.k8s.lws`) and Kueue (:mod:`tests.k8s.kueue`) ship their webhooks for an
in-cluster Service and certificates from cert-manager or their own rotation; neither exists here.
:class:`LoopbackWebhooks` is the one substitute both use: a CA and a serving certificate for
``127.0.0.1`` in the manager's ``certDir`` (``tls.crt`` / ``tls.key``, where controller-runtime
reads them), the manager's configuration keys that put its webhook server on loopback and turn
off what needs the cluster (leader election, internal cert management, metrics), the
``clientConfig`` that points the API server at it (``url`` plus the CA as ``caBundle``), and the
registration that waits until a server-side dry-run create passes through the webhooks.
"""

from __future__ import annotations

import base64
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.k8s.cluster import (
    COMPONENT_READY_TIMEOUT,
    ControlPlane,
    free_port,
    make_serving_cert,
    wait_for,
)


@dataclass(frozen=True)
class LoopbackWebhooks:
    """One manager's webhook server on ``127.0.0.1:port``, its certificate and health port."""

    cert_dir: Path
    ca_crt: Path
    port: int
    health_port: int

    @classmethod
    def make(cls, work_dir: Path, name: str) -> LoopbackWebhooks:
        """A CA and a loopback certificate for ``name`` under ``work_dir``, and two free ports."""
        cert_dir = work_dir / "webhook-certs"
        ca_crt, crt, key = make_serving_cert(cert_dir, name, name)
        (cert_dir / "tls.crt").write_bytes(crt.read_bytes())
        (cert_dir / "tls.key").write_bytes(key.read_bytes())
        return cls(cert_dir, ca_crt, free_port(), free_port())

    def manager_config(self) -> dict[str, Any]:
        """The keys of a controller-runtime ``Configuration`` that serve the webhooks here."""
        return {
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": self.port, "certDir": str(self.cert_dir)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
        }

    @property
    def health_url(self) -> str:
        """The manager's liveness endpoint."""
        return f"http://127.0.0.1:{self.health_port}/healthz"

    def client_config(self, hook: dict[str, Any]) -> dict[str, Any]:
        """``hook``'s ``clientConfig`` (a Service path) as this server's URL with the test CA."""
        path = hook["clientConfig"]["service"]["path"]
        ca_bundle = base64.b64encode(self.ca_crt.read_bytes()).decode()
        return {"url": f"https://127.0.0.1:{self.port}{path}", "caBundle": ca_bundle}

    def listening(self) -> bool:
        """Whether the webhook server completes a TLS handshake with the test CA."""
        ctx = ssl.create_default_context(cafile=str(self.ca_crt))
        try:
            urllib.request.urlopen(
                f"https://127.0.0.1:{self.port}/healthz-probe", timeout=2, context=ctx
            )
        except urllib.error.HTTPError:
            return True  # the handshake worked; the path does not matter
        except (urllib.error.URLError, OSError):
            return False
        return True


def register(
    cp: ControlPlane, configs: list[dict[str, Any]], probe: dict[str, Any], what: str
) -> None:
    """Apply the webhook configurations; wait until a server-side dry-run create of ``probe``
    passes through them (``what``: the wait's name in a timeout)."""
    cp.apply(configs)
    wait_for(
        lambda: (
            cp.kubectl("create", "--dry-run=server", "-f", "-", input=probe, check=False).returncode
            == 0
        ),
        timeout=COMPONENT_READY_TIMEOUT,
        what=what,
    )
