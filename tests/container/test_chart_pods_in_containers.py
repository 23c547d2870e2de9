"""The operator and agent images against the real local control plane, configured as in a pod.

``helm install`` puts the chart into a fresh namespace (kwok runs no containers, so its
Deployment's pods never start); then the built image runs the operator the way that Deployment
would: the chart's container arguments, a token of the chart's operator ServiceAccount mounted
where the kubelet mounts it (``/var/run/secrets/kubernetes.io/serviceaccount``: ``token``,
``ca.crt``, ``namespace``), ``KUBERNETES_SERVICE_HOST`` / ``KUBERNETES_SERVICE_PORT`` set, so the
kubernetes client and kopf take their **in-cluster** configuration (no kubeconfig exists in the
image), uid 65532, read-only root with a tmpfs ``/tmp``, no capabilities. The container shares
the host's network namespace only to reach the API server on 127.0.0.1 (its health and metrics
servers listen on 127.0.0.1 too).

Operator: the seed DeepSeekServing on two kwok GB200 nodes must reach ``Ready=True`` with
``deep_gemm_mega_moe`` and the operator's log must show no RBAC refusal; then ``docker stop``
(SIGTERM to PID 1, as the kubelet sends it) must end the operator cleanly within the chart's
termination grace period.

Agent: the image runs with the chart's DaemonSet arguments and env (``NODE_NAME`` resolved as the
downward API would) and a token bound to the DaemonSet's Pod on that Node (kwok "runs" it), so
the chart's admission policy fences it to that Node. This machine has no NVIDIA driver: the agent
must log the missing NVML once at info level, publish ``present=false``, withdraw the GPU labels
left from before, touch no label that is not ours and no other Node, and stop cleanly on SIGTERM.
"""

from __future__ import annotations

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

from deepseek_operator import names
from tests.container.conftest import HARDENED, ROOT, Image
from tests.gpu_nodes import HEALTHY_GB200_AGENT_LABELS, make_gpu_node
from tests.k8s.cluster import ControlPlane, free_port, wait_for
from tests.k8s.conditions import condition, wait_condition
from tests.k8s.operator import rbac_refusals
from tests.servings import serving

pytestmark = [pytest.mark.container, pytest.mark.e2e]

CHART = ROOT / "charts" / "deepseek-operator"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def helm(cp: ControlPlane, *args: str) -> str:
    import subprocess

    proc = subprocess.run(
        [str(cp.bin_dir / "helm"), *args], capture_output=True, text=True, env=cp.env, timeout=180
    )
    assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def service_account_volume(
    cp: ControlPlane, namespace: str, sa: str, dest: pathlib.Path, pod: str | None = None
) -> None:
    """What the kubelet's projected ServiceAccount volume holds, readable by uid 65532.

    With *pod*, the token is bound to that Pod, as the kubelet's is (it then carries the Pod's
    Node name, which the agent's admission policy checks).
    """
    dest.mkdir(mode=0o755)
    bound = ("Pod", pod) if pod else None
    (dest / "token").write_text(cp.create_token(namespace, sa, bound_object=bound))
    (dest / "ca.crt").write_bytes(pathlib.Path(cp.ca_file).read_bytes())
    (dest / "namespace").write_text(namespace)
    for f in dest.iterdir():
        f.chmod(0o644)
    dest.chmod(0o755)


class PodContainer:
    """``docker run -d`` of the image configured like a pod; ``logs()`` and ``stop()``."""

    def __init__(self, image: Image, name: str) -> None:
        self.image = image
        self.name = name
        self.health_port = free_port()
        self.metrics_port = free_port()

    def start(
        self,
        cp: ControlPlane,
        sa_dir: pathlib.Path,
        args: list[str],
        env: dict[str, str] | None = None,
        healthz: bool = True,
    ) -> PodContainer:
        """Run the image with *args* as a pod would; with *healthz*, wait for its /healthz."""
        api = urlparse(cp.server)
        flags = [f for f in HARDENED if f != "--network=none"]
        env = {
            "KUBERNETES_SERVICE_HOST": str(api.hostname),
            "KUBERNETES_SERVICE_PORT": str(api.port),
            **(env or {}),
        }
        loopback = [
            # argparse keeps the last: loopback health and metrics on free ports.
            "--health-address", "127.0.0.1", "--health-port", str(self.health_port),
            "--metrics-address", "127.0.0.1", "--metrics-port", str(self.metrics_port),
        ] if healthz else []  # fmt: skip
        self.image.docker(
            "run", "--detach", "--name", self.name, *flags, "--network=host",
            *[f"--env={k}={v}" for k, v in env.items()],
            "--volume", f"{sa_dir}:{SA_DIR}:ro",
            self.image.tag, *args, *loopback,
        )  # fmt: skip
        if healthz:
            wait_for(self._healthy, timeout=90, what="operator container /healthz")
        return self

    def _state(self) -> dict[str, Any]:
        out = self.image.docker("inspect", "--format", "{{json .State}}", self.name)
        return dict(json.loads(out.stdout))

    def _healthy(self) -> bool:
        state = self._state()
        if not state["Running"]:
            raise RuntimeError(f"container exited {state['ExitCode']}:\n{self.logs()}")
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
def releases(full_cluster: ControlPlane) -> Iterator[list[tuple[str, str]]]:
    """(release, namespace) of each chart a test installs, uninstalled after it: the chart's
    admission policies are cluster-scoped and would fence the session's later tests."""
    made: list[tuple[str, str]] = []
    yield made
    for release, namespace in made:
        helm(full_cluster, "uninstall", release, "-n", namespace, "--wait", "--timeout=120s")


def install_chart(
    cp: ControlPlane, namespace: str, releases: list[tuple[str, str]]
) -> tuple[str, list[dict[str, Any]]]:
    """``helm install`` the chart with the image built here; (peering name, manifests)."""
    release = f"dso-{uuid.uuid4().hex[:5]}"
    releases.append((release, namespace))
    peering = f"{release}-peering"  # cluster-scoped: unique per test
    helm(cp, "install", release, str(CHART), "-n", namespace,
         "--set", f"operator.peering.name={peering}",
         "--set", "image.repository=deepseek-operator", "--set", "image.tag=local")  # fmt: skip
    out = helm(cp, "get", "manifest", release, "-n", namespace)
    return peering, [d for d in yaml.safe_load_all(out) if d]


def component(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The chart object of *kind* whose component label is *name*."""
    return next(
        d
        for d in docs
        if d["kind"] == kind and d["metadata"]["labels"]["app.kubernetes.io/component"] == name
    )


@pytest.fixture
def pod_container(image: Image) -> Iterator[PodContainer]:
    container = PodContainer(image, f"dso-test-{uuid.uuid4().hex[:8]}")
    yield container
    container.remove()


def test_operator_image_runs_in_cluster_config_on_the_charts_rbac(
    full_cluster: ControlPlane,
    namespace: str,
    node_factory: Any,
    tmp_path: pathlib.Path,
    pod_container: PodContainer,
    releases: list[tuple[str, str]],
) -> None:
    cp = full_cluster
    peering, docs = install_chart(cp, namespace, releases)
    deploy = component(docs, "Deployment", "operator")
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
    op = pod_container.start(cp, sa_dir, container["args"])
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
    refused = rbac_refusals(json.dumps(r) for r in records)
    assert not refused, "the chart's RBAC refused the containerised operator:\n" + "\n".join(
        refused[:10]
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


def test_agent_image_on_a_gpu_node_without_nvml_publishes_present_false_only(
    full_cluster: ControlPlane,
    namespace: str,
    node_factory: Any,
    tmp_path: pathlib.Path,
    pod_container: PodContainer,
    releases: list[tuple[str, str]],
) -> None:
    # The agent runs where the DaemonSet put its pod, with that pod's token; this machine has no
    # NVIDIA driver, so NVML is missing: the agent must say so once, publish present=false,
    # withdraw the GPU labels an earlier (healthy) agent run left, and touch nothing else.
    cp = full_cluster
    own, other = f"{namespace}-gb0", f"{namespace}-gb1"
    for name in (own, other):
        node_factory(
            make_gpu_node(
                name, "NVIDIA-GB200", 4, (10, 0),
                agent_labels=HEALTHY_GB200_AGENT_LABELS,
                extra_labels={"pool": namespace, "example.com/owner": "someone-else"},
            )
        )  # fmt: skip
    before = {n: cp.kubectl_json("get", "node", n)["metadata"]["labels"] for n in (own, other)}
    _, docs = install_chart(cp, namespace, releases)
    daemonset = component(docs, "DaemonSet", "agent")
    pod_spec = daemonset["spec"]["template"]["spec"]
    container = pod_spec["containers"][0]
    assert container["image"] == "deepseek-operator:local"

    def agent_pod() -> str | None:
        selector = ",".join(
            f"{k}={v}" for k, v in daemonset["spec"]["selector"]["matchLabels"].items()
        )
        pods = cp.kubectl_json(
            "get",
            "pods",
            "-n",
            namespace,
            "-l",
            selector,
            "--field-selector",
            f"spec.nodeName={own}",
        )["items"]
        return pods[0]["metadata"]["name"] if pods else None

    pod = wait_for(agent_pod, timeout=60, what=f"the agent DaemonSet's pod on {own}")
    sa_dir = tmp_path / "serviceaccount"
    service_account_volume(cp, namespace, pod_spec["serviceAccountName"], sa_dir, pod=pod)
    # The container's env as the kubelet resolves it (NODE_NAME from the downward API).
    env = {
        e["name"]: own if e.get("valueFrom", {}).get("fieldRef") else e["value"]
        for e in container.get("env", [])
    }
    assert env["NODE_NAME"] == own
    agent = pod_container.start(cp, sa_dir, container["args"], env=env, healthz=False)

    def published() -> dict[str, str] | None:
        labels = cp.kubectl_json("get", "node", own)["metadata"]["labels"]
        return labels if labels.get(names.AGENT_PRESENT) == "false" else None

    try:
        labels = wait_for(published, timeout=60, what="present=false on the agent's own Node")
    except BaseException:
        print(agent.logs()[-6000:])
        raise
    ours = {k: v for k, v in labels.items() if k.startswith(names.AGENT_PREFIX)}
    assert ours == {names.AGENT_PRESENT: "false"}, "every other GPU label withdrawn"
    foreign = {k: v for k, v in before[own].items() if not k.startswith(names.AGENT_PREFIX)}
    assert {k: labels.get(k) for k in foreign} == foreign, "labels not ours are untouched"
    assert cp.kubectl_json("get", "node", other)["metadata"]["labels"] == before[other]

    logs = agent.logs()
    no_gpu = [line for line in logs.splitlines() if "No GPUs on this Node" in line]
    assert len(no_gpu) == 1 and "level=info" in no_gpu[0] and "NVML" in no_gpu[0], logs
    assert "level=error" not in logs and "Traceback" not in logs, logs
    grace_s = int(pod_spec.get("terminationGracePeriodSeconds", 30))
    took, code = agent.stop(grace_s)
    assert code == 0, f"exit {code} after {took:.1f} s:\n{agent.logs()[-3000:]}"
    assert took < grace_s
    print("agent container:", no_gpu[0], f"(SIGTERM exit after {took:.1f} s)")
