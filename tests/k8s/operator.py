"""Run ``deepseek-operator run`` as a real subprocess against the local control plane."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.cluster import ControlPlane, free_port, wait_for

# A refusal is HTTP status 403 or the word Forbidden; a bare "403" would also match a port such as
# 127.0.0.1:40307 in any retried request's log line.
_REFUSAL = re.compile(r"(?<![\d.:])403(?!\d)|forbidden", re.IGNORECASE)


def rbac_refusals(log_lines: Iterable[str]) -> list[str]:
    """The operator log lines that report a request refused by RBAC.

    A 403 for writing into a namespace that another test is deleting (NamespaceTerminating) is
    the API server protecting that deletion, not an RBAC refusal.
    """
    return [
        line for line in log_lines if _REFUSAL.search(line) and "NamespaceTerminating" not in line
    ]


REPO = Path(__file__).resolve().parents[2]
CRD_FILES = [
    REPO / "crds" / "serving.deepseek-operator.io_deepseekservings.yaml",
    REPO / "crds" / "kopf.dev_clusterkopfpeerings.yaml",
]


def install_crds(cp: ControlPlane) -> None:
    """Apply our CRDs and wait until they are served."""
    for path in CRD_FILES:
        cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    cp.wait_established("deepseekservings.serving.deepseek-operator.io")
    wait_for(
        lambda: cp.kubectl("get", "dss", "-A", check=False).returncode == 0,
        timeout=30,
        what="dss discovery",
    )


class OperatorProcess:
    """One operator process; logs go to a file that is printed when a test fails."""

    def __init__(
        self,
        cp: ControlPlane,
        log_dir: Path,
        kubeconfig: Path | None = None,
        extra: list[str] | None = None,
    ) -> None:
        self.cp = cp
        self.kubeconfig = kubeconfig or cp.kubeconfig
        self.log_path = log_dir / f"operator-{int(time.time() * 1000)}.log"
        self.extra = extra or ["--standalone"]
        self.health_port = free_port()
        self.metrics_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        """Start the process and wait for its liveness endpoint."""
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "deepseek_operator.cli", "run", *self.extra,
                "--health-address", "127.0.0.1", "--health-port", str(self.health_port),
                "--metrics-address", "127.0.0.1", "--metrics-port", str(self.metrics_port),
            ],
            env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO,
        )  # fmt: skip
        wait_for(self._healthy, timeout=60, what="operator /healthz")
        return self

    def _healthy(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"operator exited with {self.proc.returncode}:\n{self.logs()}")
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.health_port}/healthz", timeout=2
            ) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def metrics(self) -> str:
        """The Prometheus exposition text."""
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as r:
            return str(r.read().decode())

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of metric ``name`` whose labels include ``labels``."""
        total = 0.0
        for line in self.metrics().splitlines():
            if (line.startswith(name + "{") or line.startswith(name + " ")) and all(
                f'{k}="{v}"' in line for k, v in labels.items()
            ):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def logs(self, lines: int = 80) -> str:
        """Tail of the operator's log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, kill: bool = False) -> None:
        """Stop (SIGTERM, or SIGKILL with ``kill``) and wait."""
        if self.proc is not None and self.proc.poll() is None:
            if kill:
                self.proc.kill()
            else:
                self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if hasattr(self, "_log"):
            self._log.close()


@contextlib.contextmanager
def running_operator(
    cp: ControlPlane, log_dir: Path, kubeconfig: Path | None = None
) -> Iterator[OperatorProcess]:
    """``deepseek-operator run --standalone`` for the with-block, stopped after it; a block that
    ends normally also checks that no traceback reached the operator's log."""
    op = OperatorProcess(cp, log_dir, kubeconfig=kubeconfig).start()
    try:
        yield op
        assert "Traceback" not in op.log_path.read_text(errors="replace"), op.logs(200)
    finally:
        op.stop()


@pytest.fixture(scope="session")
def crds(control_plane: ControlPlane) -> ControlPlane:
    """The control plane with our CRDs installed."""
    install_crds(control_plane)
    return control_plane


@pytest.fixture(scope="session")
def operator(
    full_cluster: ControlPlane, crds: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """A session-wide operator process (admin credentials) on the full cluster."""
    op = OperatorProcess(full_cluster, tmp_path_factory.mktemp("operator")).start()
    yield op
    op.stop()


def patch_serving(
    cp: ControlPlane, namespace: str, patch: dict[str, Any], name: str = "dsv41"
) -> None:
    """Merge-patch a DeepSeekServing, as a user would with ``kubectl patch --type=merge``."""
    cp.kubectl("patch", "dss", name, "-n", namespace, "--type=merge", "-p", json.dumps(patch))
