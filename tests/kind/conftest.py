"""The kind tier's cluster: the README's recipe, run once per session, shared by every test here.

The session fixture :func:`kind_cluster` builds (or reuses) the node image, the project's image and
the vLLM stand-in, then runs the README's kind recipe with bash (``tests/kind/recipe.py``): the
unmodified kind CLI creates a control plane and three workers (two GB200 trays in one NVLink
clique, one H200 node) from the node image built here; the pod network agent, kube-network-policies,
CoreDNS and the LeaderWorkerSet controller run in it; the operator is installed by its chart. It
yields a :class:`KindCluster` (kubectl / helm / kind with this cluster's environment, image
loading, probe pods) and deletes the cluster at the end. A failing step fails the tests; nothing
skips. Later tests (a router end to end, ...) take the same fixture.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.container.conftest import parse_last_line
from tests.k8s.cluster import default_bin_dir, wait_for
from tests.kind.recipe import readme_recipe

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Cold: the Kubernetes node binaries, CoreDNS, kube-network-policies, a debootstrap rootfs and
# the images (~10 min on 2 cores).
BUILD_TIMEOUT_S = 2400
STANDIN_IMAGE = "vllm-standin:local"
#: The workers of hack/kind-cluster.yaml, by role.
GB200_TRAYS = ("kind-worker", "kind-worker2")
H200_NODE = "kind-worker3"
#: Pod IPs come from this range (networking.podSubnet of hack/kind-cluster.yaml).
POD_SUBNET_PREFIX = "10.244."


def _script(name: str, env: dict[str, str]) -> dict[str, str]:
    try:
        out = subprocess.run(
            [str(ROOT / "hack" / name)], capture_output=True, text=True, cwd=ROOT,
            timeout=BUILD_TIMEOUT_S, env=env,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"hack/{name} ran over {BUILD_TIMEOUT_S} s: {exc.stderr!r}", pytrace=False)
    if out.returncode != 0:
        pytest.fail(f"hack/{name} exited {out.returncode}:\n{out.stderr[-5000:]}", pytrace=False)
    return parse_last_line(out.stdout.strip().splitlines()[-1])


@dataclasses.dataclass
class KindCluster:
    """A running kind cluster and the tools to drive it, as a user would from a shell."""

    name: str
    kubeconfig: pathlib.Path
    kind: str
    image: str
    env: dict[str, str]
    #: What the README's recipe printed, and how long its steps took (s).
    recipe_stdout: str = ""
    timings: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def node(self) -> str:
        """The control-plane node's name."""
        return f"{self.name}-control-plane"

    @property
    def nodes(self) -> list[str]:
        """Every node (Docker container) of the cluster, control plane first."""
        return [self.node, *GB200_TRAYS, H200_NODE]

    def run(
        self, *argv: str, check: bool = True, timeout: float = 300, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a command with this cluster's KUBECONFIG and Docker engine."""
        out = subprocess.run(
            argv, capture_output=True, text=True, env=self.env, timeout=timeout, input=stdin,
            cwd=ROOT,
        )  # fmt: skip
        if check and out.returncode != 0:
            pytest.fail(
                f"{' '.join(argv)} exited {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}",
                pytrace=False,
            )
        return out

    def kubectl(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        """``kubectl ARGS`` against this cluster."""
        return self.run(str(default_bin_dir() / "kubectl"), *args, **kw)

    def kubectl_json(self, *args: str) -> Any:
        """``kubectl ARGS -o json``, parsed."""
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def apply(self, *docs: dict[str, Any]) -> None:
        """``kubectl apply`` of *docs* (server-side field defaults, as a user's ``-f``)."""
        body = "\n".join(json.dumps(d) for d in docs)
        self.kubectl("apply", "-f", "-", stdin=body)

    def helm(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``helm ARGS`` against this cluster."""
        return self.run(str(default_bin_dir() / "helm"), *args)

    def load_image(self, tag: str, *nodes: str) -> None:
        """``kind load docker-image TAG`` into *nodes* (default: every node)."""
        argv = [self.kind, "load", "docker-image", tag, "--name", self.name]
        if nodes:
            argv += ["--nodes", ",".join(nodes)]
        self.run(*argv, timeout=600)

    def probe_pod(
        self, name: str, namespace: str, node: str, *, labels: dict[str, str] | None = None,
        command: list[str] | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Run a pod from the vLLM stand-in image (Python, no vLLM) on *node*; wait for Running.

        *command* defaults to sleeping; the pod's own Python does the probing
        (:meth:`exec_python`). Returns the pod as the API server has it.
        """
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "probe",
                        "image": STANDIN_IMAGE,
                        "imagePullPolicy": "Never",
                        "command": command or ["python3", "-c", "import time; time.sleep(86400)"],
                    }
                ],
            },
        }
        self.apply(pod)

        def running() -> dict[str, Any] | None:
            got = self.kubectl("get", "pod", name, "-n", namespace, "-o", "json", check=False)
            obj = json.loads(got.stdout) if got.returncode == 0 else {}
            ok = obj.get("status", {}).get("phase") == "Running" and obj["status"].get("podIP")
            return obj if ok else None

        return wait_for(running, timeout=120, interval=1, what=f"probe pod {namespace}/{name}")

    def exec_python(
        self, pod: str, namespace: str, code: str, *args: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl exec POD -- python3 -c CODE ARGS``."""
        return self.kubectl(
            "exec", pod, "-n", namespace, "--", "python3", "-c", code, *args, check=check,
            timeout=60,
        )  # fmt: skip

    def node_usage(self) -> dict[str, dict[str, str]]:
        """``docker stats`` of every node container: memory and CPU now."""
        out = self.run(
            "docker", "stats", "--no-stream", "--format", "{{json .}}", *self.nodes, timeout=120
        ).stdout
        rows = [json.loads(line) for line in out.splitlines() if line.strip()]
        return {
            r["Name"]: {"mem": r["MemUsage"].split(" / ")[0], "cpu": r["CPUPerc"]} for r in rows
        }


def build_images(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The node image and the project's image (scripts), then the vLLM stand-in on the same base."""
    node = _script("build-kind-node.sh", dict(env, PYTHON=sys.executable))
    image = _script("build-image.sh", dict(env, PYTHON=sys.executable))
    docker_env = dict(env, DOCKER_BUILDKIT="0")
    if node["DOCKER_HOST"]:
        docker_env["DOCKER_HOST"] = node["DOCKER_HOST"]
    standin = subprocess.run(
        ["docker", "build", "-q", "-t", STANDIN_IMAGE, "--build-arg", f"BASE_IMAGE={image['BASE']}",
         str(ROOT / "tests" / "kind" / "vllm-standin")],
        capture_output=True, text=True, env=docker_env, timeout=600,
    )  # fmt: skip
    if standin.returncode != 0:
        pytest.fail(f"building the vLLM stand-in failed:\n{standin.stderr[-3000:]}", pytrace=False)
    return node, image


@pytest.fixture(scope="session")
def kind_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KindCluster]:
    """The README's kind recipe run once: a multi-node cluster with DNS, pod network, policies, LWS
    and the operator. Deleted at the end of the session.

    The cluster is named ``kind`` as the README's commands assume (``kind-control-plane``,
    ``kind-worker``...). A cluster of that name that exists already fails the run instead of
    being touched.
    """
    t0 = time.monotonic()
    node, _ = build_images(dict(os.environ))
    timings = {"images": time.monotonic() - t0}
    env = dict(os.environ)
    if node["DOCKER_HOST"]:
        env["DOCKER_HOST"] = node["DOCKER_HOST"]
    kubeconfig = tmp_path_factory.mktemp("kind") / "kubeconfig"
    env["KUBECONFIG"] = str(kubeconfig)
    kind = node["KIND"]
    cluster = KindCluster(
        name="kind", kubeconfig=kubeconfig, kind=kind, image="deepseek-operator:dev", env=env,
        timings=timings,
    )  # fmt: skip
    existing = cluster.run(kind, "get", "clusters").stdout.split()
    if cluster.name in existing:
        pytest.fail("a kind cluster named 'kind' exists already; delete it to run this tier")
    try:
        t1 = time.monotonic()
        out = cluster.run("bash", "-euo", "pipefail", "-c", readme_recipe(), timeout=1200)
        cluster.timings["readme_recipe"] = time.monotonic() - t1
        cluster.recipe_stdout = out.stdout
        t2 = time.monotonic()
        cluster.load_image(STANDIN_IMAGE)
        cluster.timings["load_standin"] = time.monotonic() - t2
        print("\nkind tier setup (s):", {k: round(v, 1) for k, v in cluster.timings.items()})
        print("kind nodes after setup:", cluster.node_usage())
        yield cluster
    finally:
        if cluster.kubeconfig.exists():
            try:
                print("kind nodes at the end:", cluster.node_usage())
            except BaseException as exc:  # a report only: the delete below must run
                print("kind nodes at the end: docker stats failed:", exc)
        cluster.run(
            kind, "delete", "cluster", "--name", cluster.name, "--kubeconfig", str(kubeconfig),
            check=False, timeout=300,
        )  # fmt: skip
