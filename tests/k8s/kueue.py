"""The real Kueue manager (sigs.k8s.io/kueue) in the local control plane, for the tests that need it.

``hack/build-control-plane.sh kueue`` builds the manager from the Go module proxy at
``KUEUE_VERSION`` (``hack/versions.env``) into ``bin/kueue-<version>/kueue`` and copies the
release's CRDs (``config/components/crd/bases``) and webhook manifests
(``config/components/webhook/manifests.yaml``) beside it. :class:`KueueInstall` runs it as the
release's kustomize overlay would, with the same local substitutions as :mod:`tests.k8s.lws`
(the webhook server, its certificate and configurations: :class:`tests.k8s.webhooks.LoopbackWebhooks`):

* the webhook server listens on 127.0.0.1 with a certificate from a local CA (instead of Kueue's
  internal cert rotation, which needs an in-cluster Service and Secret);
* the webhook configurations point at ``https://127.0.0.1:<port><path>`` with that CA as
  ``caBundle``, with the overlay's namespaceSelector patches (never kube-system or kueue-system);
  only the webhooks of Kueue's own kinds and of the integrations enabled here are registered;
* leader election, metrics and the visibility server (an aggregated API server that needs an
  in-cluster Service) are off;
* the manager runs in a private mount namespace whose ``/etc`` is an overlay holding
  ``/etc/kueue/metrics/certs``: with internal cert management off, Kueue v0.17 reads a metrics
  certificate from that fixed path (and exits without one) even when metrics are disabled, and
  the host's ``/etc`` stays untouched (``unshare`` as root, as the tests run).

Integrations: ``pod``, ``deployment`` and ``leaderworkerset.x-k8s.io/leaderworkerset``, the ones a
DeepSeekServing's workloads need. Fixture ``kueue_cluster`` (module): :func:`k8s.lws.lws_cluster`
plus Kueue; at the end of the module Kueue goes again (webhooks, process, CRDs), so only the
tests that ask for it run with Kueue's pod webhook in the path.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s.cluster import Component, ControlPlane, require_binaries, wait_for
from tests.k8s.webhooks import LoopbackWebhooks, register

KUEUE_VERSION = next(
    line.split("=", 1)[1].strip()
    for line in (Path(__file__).resolve().parents[2] / "hack/versions.env").read_text().splitlines()
    if line.startswith("KUEUE_VERSION=")
)
KUEUE_DIR = f"kueue-{KUEUE_VERSION}"
KUEUE_BINARY = f"{KUEUE_DIR}/kueue"
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_NAMESPACE = "kueue-system"
FRAMEWORKS = ("pod", "deployment", "leaderworkerset.x-k8s.io/leaderworkerset")
#: Resources whose webhooks are registered: Kueue's own kinds and the enabled integrations'.
_HOOKED = {"pods", "deployments", "leaderworkersets"}
#: Names the release's overlay gives the webhook configurations (namePrefix ``kueue-``).
WEBHOOK_CONFIGS = {
    "MutatingWebhookConfiguration": "kueue-mutating-webhook-configuration",
    "ValidatingWebhookConfiguration": "kueue-validating-webhook-configuration",
}
#: The release overlay's patch: the pod, deployment and statefulset webhooks skip these.
_SKIPPED_NAMESPACES = {
    "matchExpressions": [
        {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["kube-system", KUEUE_NAMESPACE],
        }
    ]
}
GATE = "kueue.x-k8s.io/admission"
"""The scheduling gate Kueue's pod webhook puts on every pod it manages, until admission."""


def webhook_configurations(manifests: Path, server: LoopbackWebhooks) -> list[dict[str, Any]]:
    """The release's webhook configurations for the enabled integrations, served on loopback."""
    out = []
    for doc in yaml.safe_load_all((manifests / "webhooks.yaml").read_text()):
        if not doc:
            continue
        hooks = []
        for hook in doc["webhooks"]:
            rules = hook.get("rules") or []
            groups = {g for r in rules for g in r.get("apiGroups", [])}
            resources = {res for r in rules for res in r.get("resources", [])}
            if KUEUE_GROUP not in groups and not resources & _HOOKED:
                continue
            hook["clientConfig"] = server.client_config(hook)
            if resources & {"pods", "deployments"}:
                hook["namespaceSelector"] = _SKIPPED_NAMESPACES
            hooks.append(hook)
        doc["metadata"] = {"name": WEBHOOK_CONFIGS[doc["kind"]]}
        doc["webhooks"] = hooks
        out.append(doc)
    return out


@dataclass
class KueueInstall:
    """The Kueue manager process plus its CRDs and webhook configurations in one cluster."""

    cp: ControlPlane
    work_dir: Path
    component: Component | None = None
    webhooks: LoopbackWebhooks | None = None
    crds: list[str] = field(default_factory=list)

    @property
    def manifests(self) -> Path:
        """The release's manifest directory (``bin/kueue-<version>/manifests``)."""
        return self.cp.bin_dir / KUEUE_DIR / "manifests"

    def start(self) -> KueueInstall:
        """Install the CRDs, start the manager, then register its webhooks; wait for all."""
        self.cp.kubectl("create", "namespace", KUEUE_NAMESPACE, check=False)
        self.install_crds()
        self._start_manager()
        self.install_webhooks()
        return self

    def install_crds(self) -> None:
        """Server-side apply the release's CRDs (too large for client-side apply)."""
        for path in sorted((self.manifests / "crd").glob("*.yaml")):
            self.crds.append(yaml.safe_load(path.read_text())["metadata"]["name"])
            self.cp.kubectl(
                "apply", "--server-side", "--force-conflicts", "-f", str(path), timeout=120
            )
        for crd in self.crds:
            self.cp.wait_crd_established(crd)
        wait_for(
            lambda: (
                self.cp.kubectl("get", "workloads.kueue.x-k8s.io", "-A", check=False).returncode
                == 0
            ),
            timeout=30,
            what="Kueue workloads discovery",
        )

    def install_webhooks(self) -> None:
        """Register the webhooks; wait until a server-side dry-run ClusterQueue passes them."""
        assert self.webhooks is not None
        configs = webhook_configurations(self.manifests, self.webhooks)
        probe = cluster_queue("webhook-probe", gpus=0)
        register(self.cp, configs, probe, "Kueue webhooks answering a dry-run create")

    def uninstall(self) -> None:
        """Webhooks first (no pod create may wait on a stopped manager), then the manager and the
        CRDs (finalizers the stopped manager would have removed are cleared)."""
        for kind, name in WEBHOOK_CONFIGS.items():
            self.cp.kubectl("delete", kind.lower(), name, "--ignore-not-found", check=False)
        if self.component is not None:
            self.component.stop()
            self.cp.components.remove(self.component)
        for crd in self.crds:
            listed = self.cp.kubectl("get", crd, "-A", "-o", "json", check=False)
            if listed.returncode != 0:
                continue
            for item in json.loads(listed.stdout)["items"]:
                meta = item["metadata"]
                where = ["-n", meta["namespace"]] if meta.get("namespace") else []
                self.cp.kubectl(
                    "patch", crd, meta["name"], *where, "--type=merge",
                    "-p", '{"metadata":{"finalizers":null}}', check=False,
                )  # fmt: skip
            self.cp.kubectl("delete", "crd", crd, "--ignore-not-found", "--wait=false", check=False)

    def _start_manager(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.webhooks = webhooks = LoopbackWebhooks.make(self.work_dir, "kueue-webhook")
        cert_dir = webhooks.cert_dir
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": KUEUE_NAMESPACE,
            **webhooks.manager_config(),
            "featureGates": {"VisibilityOnDemand": False},
            "integrations": {"frameworks": list(FRAMEWORKS)},
        }
        config_path = self.work_dir / "kueue-config.yaml"
        config_path.write_text(json.dumps(config, indent=2))  # JSON is valid YAML
        upper, work = self.work_dir / "etc-upper", self.work_dir / "etc-work"
        upper.mkdir(exist_ok=True)
        work.mkdir(exist_ok=True)
        metrics_certs = "/etc/kueue/metrics/certs"
        script = (
            f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={work} /etc"
            f" && mkdir -p {metrics_certs}"
            f" && cp {cert_dir}/tls.crt {cert_dir}/tls.key {metrics_certs}/"
            ' && exec "$@"'
        )
        self.component = Component(
            "kueue",
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                "kueue",
                str(self.cp.bin_dir / KUEUE_BINARY),
                f"--config={config_path}",
                f"--kubeconfig={self.cp.kubeconfig}",
                "--zap-log-level=2",
            ],
            self.cp.log_dir / "kueue.log",
            health_url=webhooks.health_url,
        )
        self.cp.run_component(self.component)


def resource_flavor(name: str = "default-flavor") -> dict[str, Any]:
    """An empty ResourceFlavor (every node is of it)."""
    return {
        "apiVersion": f"{KUEUE_GROUP}/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {},
    }


def cluster_queue(
    name: str, *, gpus: int, flavor: str = "default-flavor", preempt_lower: bool = False
) -> dict[str, Any]:
    """A ClusterQueue for every namespace with ``gpus`` nvidia.com/gpu (CPU and memory ample);
    ``preempt_lower``: a Workload may preempt lower-priority ones of the same ClusterQueue."""
    return {
        "apiVersion": f"{KUEUE_GROUP}/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            **({"preemption": {"withinClusterQueue": "LowerPriority"}} if preempt_lower else {}),
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [
                                {"name": "cpu", "nominalQuota": "1000"},
                                {"name": "memory", "nominalQuota": "100Ti"},
                                {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)},
                            ],
                        }
                    ],
                }
            ],
        },
    }


def admission_check(name: str) -> dict[str, Any]:
    """An AdmissionCheck served by the operator (a P/D pair admitted whole)."""
    return {
        "apiVersion": f"{KUEUE_GROUP}/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {"name": name},
        "spec": {"controllerName": "serving.deepseek-operator.io/pd-pair"},
    }


def local_queue(name: str, namespace: str, cluster_queue_name: str) -> dict[str, Any]:
    """A LocalQueue in ``namespace`` pointing at a ClusterQueue."""
    return {
        "apiVersion": f"{KUEUE_GROUP}/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue_name},
    }


@pytest.fixture(scope="module")
def kueue_cluster(
    lws_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    """The full cluster with LWS, plus the real Kueue manager for this module's tests."""
    require_binaries((KUEUE_BINARY, f"{KUEUE_DIR}/manifests"))
    install = KueueInstall(lws_cluster, tmp_path_factory.mktemp("kueue"))
    try:
        install.start()
    except Exception as exc:
        install.uninstall()
        pytest.fail(f"Kueue failed to start: {exc}\n{lws_cluster.log_tails(60)}", pytrace=False)
    lws_cluster.extras["kueue"] = install
    try:
        yield lws_cluster
    finally:
        del lws_cluster.extras["kueue"]
        install.uninstall()


def workload_priority_class(name: str, value: int) -> dict[str, Any]:
    """A Kueue WorkloadPriorityClass (label ``kueue.x-k8s.io/priority-class`` names it)."""
    return {
        "apiVersion": f"{KUEUE_GROUP}/v1beta2",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
        "description": "a test's priority",
    }
