"""A kind cluster per session, from the node image ``hack/build-kind-node.sh`` builds.

The session fixture builds (or reuses) the node image and the project's image and prepares the
environment (a private kubeconfig, the Docker engine, the kind/kubectl/helm built here on PATH);
the test runs the README's commands, which create the cluster with the unmodified kind CLI; the
fixture deletes it at the end. A failing step fails the tests; nothing skips.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.container.conftest import parse_last_line
from tests.k8s.cluster import default_bin_dir

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Cold: the Kubernetes node binaries, a debootstrap rootfs and the images (~6 min on 2 cores).
BUILD_TIMEOUT_S = 2400
STANDIN_IMAGE = "vllm-standin:local"


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

    @property
    def node(self) -> str:
        """The control-plane node's name (the one node)."""
        return f"{self.name}-control-plane"

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

    def helm(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``helm ARGS`` against this cluster."""
        return self.run(str(default_bin_dir() / "helm"), *args)


@pytest.fixture(scope="session")
def kind_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KindCluster]:
    """Build the images; yield the environment the README's kind recipe runs in; delete the cluster.

    The recipe itself (``tests/kind/test_kind.py``) creates the cluster, named ``kind`` as the
    README's commands assume (``kind-control-plane``). A cluster of that name that exists already
    fails the run instead of being touched.
    """
    env = dict(os.environ, PYTHON=sys.executable)
    node = _script("build-kind-node.sh", env)
    image = _script("build-image.sh", env)
    env = dict(os.environ)
    if node["DOCKER_HOST"]:
        env["DOCKER_HOST"] = node["DOCKER_HOST"]
    # The vLLM stand-in (tests/kind/vllm-standin) on the same local Python base.
    standin = subprocess.run(
        ["docker", "build", "-q", "-t", STANDIN_IMAGE, "--build-arg", f"BASE_IMAGE={image['BASE']}",
         str(ROOT / "tests" / "kind" / "vllm-standin")],
        capture_output=True, text=True, env=dict(env, DOCKER_BUILDKIT="0"), timeout=600,
    )  # fmt: skip
    if standin.returncode != 0:
        pytest.fail(f"building the vLLM stand-in failed:\n{standin.stderr[-3000:]}", pytrace=False)
    kubeconfig = tmp_path_factory.mktemp("kind") / "kubeconfig"
    env["KUBECONFIG"] = str(kubeconfig)
    kind = node["KIND"]
    # The README's commands name kind, kubectl and helm: the ones built here come first.
    env["PATH"] = os.pathsep.join(
        [str(pathlib.Path(kind).parent), str(default_bin_dir()), env["PATH"]]
    )
    cluster = KindCluster(
        name="kind", kubeconfig=kubeconfig, kind=kind, image="deepseek-operator:dev", env=env
    )
    existing = cluster.run(kind, "get", "clusters").stdout.split()
    if cluster.name in existing:
        pytest.fail("a kind cluster named 'kind' exists already; delete it to run this tier")
    try:
        yield cluster
    finally:
        cluster.run(
            kind, "delete", "cluster", "--name", cluster.name, "--kubeconfig", str(kubeconfig),
            check=False, timeout=300,
        )  # fmt: skip
