"""The real LeaderWorkerSet controller (sigs.k8s.io/lws) in the local control plane.

``hack/build-control-plane.sh`` builds ``lws-controller`` from the Go module proxy at
``LWS_VERSION`` (``hack/versions.env``) and copies the release's CRDs and webhook manifests
(``config/crd/bases``, ``config/webhook``) into ``bin/lws-manifests/``. :class:`LwsInstall` runs
it the way its Helm chart / kustomize overlay would, with three local substitutions:

* the webhook server listens on 127.0.0.1 with a certificate from a local CA (instead of
  cert-manager or LWS's internal cert rotation, which needs an in-cluster Service and Secret);
* the webhook configurations point at ``https://127.0.0.1:<port><path>`` with that CA as
  ``caBundle`` (instead of ``service: lws-system/lws-webhook-service``), after the release's own
  kustomize patches (the pod webhooks only see pods labelled ``leaderworkerset.sigs.k8s.io/name``);
* leader election is off (one replica) and the metrics endpoint is disabled.

The first two and the last are :class:`tests.k8s.webhooks.LoopbackWebhooks`, shared with Kueue.

Fixture ``lws_cluster`` (session): :func:`k8s.cluster.full_cluster` plus LWS (CRDs Established,
controller healthy, webhooks answering). It yields the :class:`ControlPlane`; the
:class:`LwsInstall` is ``lws_cluster.extras["lws"]``, whose :meth:`LwsInstall.uninstall` and
:meth:`LwsInstall.install` let a test see a cluster without LWS and restore it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s.cluster import (
    COMPONENT_READY_TIMEOUT,
    Component,
    ControlPlane,
    require_binaries,
    wait_for,
)
from tests.k8s.webhooks import LoopbackWebhooks, register

LWS_BINARY = "lws-controller"
LWS_GROUP = "leaderworkerset.x-k8s.io"
LWS_CRD = f"leaderworkersets.{LWS_GROUP}"
#: Every CRD the controller watches; it fails to start without the DisaggregatedSet one.
LWS_CRDS = (LWS_CRD, "disaggregatedsets.disaggregatedset.x-k8s.io")
#: Names the release's kustomize overlay gives the webhook configurations (namePrefix ``lws-``).
WEBHOOK_CONFIGS = {
    "MutatingWebhookConfiguration": "lws-mutating-webhook-configuration",
    "ValidatingWebhookConfiguration": "lws-validating-webhook-configuration",
}
_PATCH_FILES = {
    "MutatingWebhookConfiguration": "webhooks-mutating-patch.yaml",
    "ValidatingWebhookConfiguration": "webhooks-validating-patch.yaml",
}


def manifest_dir(bin_dir: Path) -> Path:
    """Where the build script put the release's CRDs and webhook manifests."""
    return bin_dir / "lws-manifests"


def _apply_json_patch_replaces(obj: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    """Apply the ``replace`` operations of a kustomize JSON patch (all the release uses)."""
    for op in ops:
        if op.get("op") != "replace":
            raise ValueError(f"unsupported patch op {op.get('op')!r} in the LWS webhook patch")
        *parents, last = [p for p in str(op["path"]).split("/") if p]
        target: Any = obj
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            target[int(last)] = op["value"]
        else:
            target[last] = op["value"]


def webhook_configurations(manifests: Path, server: LoopbackWebhooks) -> list[dict[str, Any]]:
    """The release's webhook configurations, patched as its overlay does, served on loopback."""
    out = []
    for doc in yaml.safe_load_all((manifests / "webhooks.yaml").read_text()):
        if not doc:
            continue
        kind = doc["kind"]
        patch = yaml.safe_load((manifests / _PATCH_FILES[kind]).read_text())
        _apply_json_patch_replaces(doc, patch)
        doc["metadata"] = {"name": WEBHOOK_CONFIGS[kind]}
        for hook in doc["webhooks"]:
            hook["clientConfig"] = server.client_config(hook)
        out.append(doc)
    return out


@dataclass
class LwsInstall:
    """The LWS controller process plus its CRDs and webhook configurations in one cluster."""

    cp: ControlPlane
    work_dir: Path
    component: Component | None = None
    webhooks: LoopbackWebhooks | None = None
    _configs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def manifests(self) -> Path:
        """The release's manifest directory (``bin/lws-manifests``)."""
        return manifest_dir(self.cp.bin_dir)

    def start(self) -> LwsInstall:
        """Install the CRDs, start the controller, then register its webhooks; wait for all."""
        self.install_crds()
        self._start_controller()
        self.install_webhooks()
        return self

    def install(self) -> None:
        """Re-install CRDs and webhooks after :meth:`uninstall` (the controller keeps running)."""
        self.install_crds()
        self.install_webhooks()

    def uninstall(self) -> None:
        """Remove webhooks and CRDs (and with them every LeaderWorkerSet), as a cluster without
        LWS has; wait until the API no longer serves the kind."""
        for kind, name in WEBHOOK_CONFIGS.items():
            self.cp.kubectl("delete", kind.lower(), name, "--ignore-not-found")
        for crd in LWS_CRDS:
            self.cp.kubectl("delete", "crd", crd, "--ignore-not-found", timeout=120)
        wait_for(
            lambda: (
                self.cp.kubectl("get", "crd", LWS_CRD, check=False).returncode != 0
                and LWS_GROUP not in self.cp.kubectl("api-versions").stdout
            ),
            timeout=60,
            what="LeaderWorkerSet API gone",
        )

    def install_crds(self) -> None:
        """Server-side apply the release's CRDs (too large for client-side apply's annotation)."""
        for path in sorted(self.manifests.glob("*.yaml")):
            if path.name.startswith("webhooks"):
                continue
            self.cp.kubectl(
                "apply", "--server-side", "--force-conflicts", "-f", str(path), timeout=120
            )
        for crd in LWS_CRDS:
            self.cp.wait_crd_established(crd)
        wait_for(
            lambda: self.cp.kubectl("get", "leaderworkersets", "-A", check=False).returncode == 0,
            timeout=30,
            what="leaderworkersets discovery",
        )

    def install_webhooks(self) -> None:
        """Register the webhooks and wait until a server-side dry-run LWS passes through them."""
        assert self.webhooks is not None
        self._configs = webhook_configurations(self.manifests, self.webhooks)
        probe = minimal_lws("webhook-probe", "default")
        register(self.cp, self._configs, probe, "LWS webhooks answering a dry-run create")

    def _start_controller(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.webhooks = webhooks = LoopbackWebhooks.make(self.work_dir, "lws-webhook")
        config = {
            "apiVersion": "config.lws.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            **webhooks.manager_config(),
        }
        config_path = self.work_dir / "lws-config.yaml"
        config_path.write_text(json.dumps(config, indent=2))  # JSON is valid YAML
        self.component = Component(
            "lws-controller",
            [
                str(self.cp.bin_dir / LWS_BINARY),
                f"--config={config_path}",
                f"--kubeconfig={self.cp.kubeconfig}",
                "--zap-log-level=info",
            ],
            self.cp.log_dir / "lws-controller.log",
            health_url=webhooks.health_url,
        )
        self.cp.run_component(self.component)
        wait_for(self._webhook_listening, timeout=COMPONENT_READY_TIMEOUT, what="LWS webhook TLS")

    def _webhook_listening(self) -> bool:
        assert self.component is not None and self.webhooks is not None
        self.component.check_running()
        return self.webhooks.listening()


def minimal_lws(
    name: str,
    namespace: str,
    *,
    size: int = 2,
    replicas: int = 1,
    image: str = "registry.invalid/placeholder:0",
) -> dict[str, Any]:
    """A small hand-written LeaderWorkerSet (one container, no resources) for probes and tests."""
    container = {"name": "main", "image": image}
    return {
        "apiVersion": f"{LWS_GROUP}/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": size,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "workerTemplate": {"spec": {"containers": [container]}},
            },
        },
    }


@pytest.fixture(scope="session")
def lws_cluster(
    full_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> ControlPlane:
    """The full cluster plus the real LWS controller, its CRDs and its webhooks."""
    require_binaries((LWS_BINARY, "lws-manifests"))
    if "lws" not in full_cluster.extras:
        install = LwsInstall(full_cluster, tmp_path_factory.mktemp("lws"))
        try:
            install.start()
        except Exception as exc:
            pytest.fail(
                f"LWS controller failed to start: {exc}\n{full_cluster.log_tails(60)}",
                pytrace=False,
            )
        full_cluster.extras["lws"] = install
    return full_cluster
