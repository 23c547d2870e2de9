"""The operator image against the real local control plane, configured as in a pod.

``helm install`` puts the chart into a fresh namespace (kwok runs no containers, so its
Deployment's pods never start); then the built image runs the operator the way that Deployment
would: the chart's container arguments, a token of the chart's operator ServiceAccount mounted
where the kubelet mounts it (``/var/run/secrets/kubernetes.io/serviceaccount``: ``token``,
``ca.crt``, ``namespace``), ``KUBERNETES_SERVICE_HOST`` / ``KUBERNETES_SERVICE_PORT`` set, so the
kubernetes client and kopf take their **in-cluster** configuration (no kubeconfig exists in the
image), uid 65532, read-only root with a tmpfs ``/tmp``, no capabilities. The container shares
the host's network namespace only to reach the API server on 127.0.0.1 (its health and metrics
servers listen on 127.0.0.1 too).

The seed DeepSeekServing on two kwok GB200 nodes must reach ``Ready=True`` with
``deep_gemm_mega_moe`` and the operator's log must show no RBAC refusal; then ``docker stop``
(SIGTERM to PID 1, as the kubelet sends it) must end the operator cleanly within the chart's
termination grace period.
"""

from __future__ import annotations

import copy
import json
import pathlib
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from tests.container.conftest import HARDENED, ROOT, Image
from tests.gpu_nodes import HEALTHY_GB200_AGENT_LABELS, make_gpu_node
from tests.k8s.cluster import ControlPlane, free_port, wait_for
from tests.k8s.conditions import condition, wait_condition

pytestmark = [pytest.mark.container, pytest.mark.e2e]

CHART = ROOT / "charts" / "deepseek-operator"
SEED = yaml.safe_load((ROOT / "examples" / "dsv41-flash-gb200.yaml").read_text())
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def helm(cp: ControlPlane, *args: str) -> str:
    import subprocess

    proc = subprocess.run(
        [str(cp.bin_dir / "helm"), *args], capture_output=True, text=True, env=cp.env, timeout=180
    )
    assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def serving(namespace: str) -> dict[str, Any]:
    doc = copy.deepcopy(SEED)
    doc["metadata"] = {"name": "dsv41", "namespace": namespace}
    doc["spec"].pop("tolerations", None)
    doc["spec"]["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    doc["spec"]["nodeSelector"] = {"pool": namespace}
    return doc


def service_account_volume(cp: ControlPlane, namespace: str, sa: str, dest: pathlib.Path) -> None:
    """What the kubelet's projected ServiceAccount volume holds, readable by uid 65532."""
    dest.mkdir(mode=0o755)
    (dest / "token").write_text(cp.create_token(namespace, sa))
    (dest / "ca.crt").write_bytes(pathlib.Path(cp.ca_file).read_bytes())
    (dest / "namespace").write_text(namespace)
    for f in dest.iterdir():
        f.chmod(0o644)
    dest.chmod(0o755)


class OperatorContainer:
    """``docker run -d`` of the operator image; ``logs()`` and ``stop()`` for the test."""

    def __init__(self, image: Image, name: str) -> None:
        self.image = image
        self.name = name
        self.health_port = free_port()
        self.metrics_port = free_port()

    def start(self, cp: ControlPlane, sa_dir: pathlib.Path, args: list[str]) -> OperatorContainer:
        api = urlparse(cp.server)
        flags = [f for f in HARDENED if f != "--network=none"]
        self.image.docker(
            "run", "--detach", "--name", self.name, *flags, "--network=host",
            "--env", f"KUBERNETES_SERVICE_HOST={api.hostname}",
            "--env", f"KUBERNETES_SERVICE_PORT={api.port}",
            "--volume", f"{sa_dir}:{SA_DIR}:ro",
            self.image.tag, *args,
            # argparse keeps the last: loopback health and metrics on free ports.
            "--health-address", "127.0.0.1", "--health-port", str(self.health_port),
            "--metrics-address", "127.0.0.1", "--metrics-port", str(self.metrics_port),
        )  # fmt: skip
        wait_for(self._healthy, timeout=90, what="operator container /healthz")
        return self

    def _state(self) -> dict[str, Any]:
        out = self.image.docker("inspect", "--format", "{{json .State}}", self.name)
        return dict(json.loads(out.stdout))

    def _healthy(self) -> bool:
        state = self._state()
        if not state["Running"]:
            raise RuntimeError(f"operator container exited {state['ExitCode']}:\n{self.logs()}")
        try:
            url = f"http://127.0.0.1:{self.health_port}/healthz"
            with urllib.request.urlopen(url, timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def logs(self) -> str:
        out = self.image.docker("logs", self.name, check=False)
        return out.stdout + out.stderr

    def records(self) -> list[dict[str, Any]]:
        records = []
        for line in self.logs().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                records.append({"msg": line})
        return records

    def stop(self, grace_s: int) -> tuple[float, int]:
        """``docker stop -t grace_s`` (SIGTERM, then SIGKILL); the seconds it took and the exit code."""
        t0 = time.monotonic()
        self.image.docker("stop", "--time", str(grace_s), self.name, timeout=grace_s + 60)
        took = time.monotonic() - t0
        return took, int(self._state()["ExitCode"])

    def remove(self) -> None:
        self.image.docker("rm", "--force", self.name, check=False)


@pytest.fixture
def operator_container(image: Image) -> Iterator[OperatorContainer]:
    container = OperatorContainer(image, f"dso-operator-{uuid.uuid4().hex[:8]}")
    yield container
    container.remove()


def test_operator_image_runs_in_cluster_config_on_the_charts_rbac(
    full_cluster: ControlPlane,
    namespace: str,
    node_factory: Any,
    tmp_path: pathlib.Path,
    operator_container: OperatorContainer,
) -> None:
    cp = full_cluster
    release = f"dso-{uuid.uuid4().hex[:5]}"
    peering = f"{release}-peering"
    helm(cp, "install", release, str(CHART), "-n", namespace,
         "--set", f"operator.peering.name={peering}",
         "--set", "image.repository=deepseek-operator", "--set", "image.tag=local")  # fmt: skip
    docs = [
        d for d in yaml.safe_load_all(helm(cp, "get", "manifest", release, "-n", namespace)) if d
    ]
    deploy = next(
        d
        for d in docs
        if d["kind"] == "Deployment"
        and d["metadata"]["labels"]["app.kubernetes.io/component"] == "operator"
    )
    pod_spec = deploy["spec"]["template"]["spec"]
    container = pod_spec["containers"][0]
    assert container["image"] == "deepseek-operator:local", "the chart runs the image built here"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    grace_s = int(pod_spec.get("terminationGracePeriodSeconds", 30))

    sa_dir = tmp_path / "serviceaccount"
    service_account_volume(cp, namespace, pod_spec["serviceAccountName"], sa_dir)
    for name in (f"{namespace}-gb0", f"{namespace}-gb1"):
        node_factory(
            make_gpu_node(
                name, "NVIDIA-GB200", 4, (10, 0),
                agent_labels=HEALTHY_GB200_AGENT_LABELS, extra_labels={"pool": namespace},
            )
        )  # fmt: skip

    t0 = time.monotonic()
    op = operator_container.start(cp, sa_dir, container["args"])
    started = time.monotonic() - t0
    try:
        cp.apply(serving(namespace))
        obj = wait_condition(cp, namespace, "Ready", "True", timeout=120)
    except BaseException:
        print(op.logs()[-6000:])
        raise
    ready = time.monotonic() - t0
    backend = condition(obj, "BackendResolved")
    assert backend["status"] == "True" and backend["reason"] == "MegaMoESelected"
    assert obj["status"]["resolved"]["moeBackend"] == "deep_gemm_mega_moe"

    records = op.records()
    assert any(
        r.get("msg") == "Reconciled DeepSeekServing" and r.get("namespace") == namespace
        for r in records
    ), op.logs()[-6000:]
    refused = [
        r
        for r in records
        if ("403" in json.dumps(r) or "forbidden" in json.dumps(r).lower())
        and "NamespaceTerminating" not in json.dumps(r)
    ]
    assert not refused, "the chart's RBAC refused the containerised operator:\n" + "\n".join(
        map(json.dumps, refused[:10])
    )
    peers = cp.kubectl_json("get", "clusterkopfpeering", peering).get("status") or {}
    assert peers, "the operator in the container did not register in the chart's peering"

    # SIGTERM to PID 1, as the kubelet sends it: the operator must stop on its own (exit 0) well
    # inside the grace period, not be SIGKILLed at its end (exit 137).
    took, code = op.stop(grace_s)
    assert code == 0, f"exit {code} after {took:.1f} s:\n{op.logs()[-3000:]}"
    assert took < grace_s, f"stopping took {took:.1f} s of a {grace_s} s grace period"
    print(
        "operator container timings (s):",
        {"healthy": round(started, 1), "ready": round(ready, 1), "sigterm_exit": round(took, 1)},
    )
