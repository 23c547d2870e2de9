"""The benchmark's cluster side: GPU Nodes and DeepSeekServings in bulk, the two operators.

Nodes (60 % GB200 NVL4 trays with node-agent labels, 40 % H200, spread over pools) are posted
straight to the API server (no kwok: nothing rewrites them). The operators: ours
(``deepseek-operator run --standalone``, :class:`tests.k8s.operator.OperatorProcess`) and the
no-op baseline (``bench/noop_operator.py`` under ``kopf run``), both observed through their
``deepseek_operator_nodes`` gauge.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from deepseek_operator import names
from tests.gpu_nodes import HEALTHY_GB200_AGENT_LABELS, agent_labels, make_gpu_node
from tests.k8s.cluster import ControlPlane, wait_for
from tests.k8s.operator import OperatorProcess
from tests.k8s.rest import Rest

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "examples" / "dsv41-flash-gb200.yaml"
NOOP = ROOT / "bench" / "noop_operator.py"
GB200_AGENT = HEALTHY_GB200_AGENT_LABELS
H200_AGENT = agent_labels("NVIDIA-H200")
DSS_PATH = f"/apis/{names.GROUP}/{names.VERSION}/{names.PLURAL}"
"""The DeepSeekServings of every namespace (LIST and watch)."""


def serving_path(namespace: str, name: str = "") -> str:
    """The API path of the DeepSeekServings of *namespace* (of one, with *name*)."""
    path = f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{namespace}/{names.PLURAL}"
    return f"{path}/{name}" if name else path


def delete_served(cp: ControlPlane, namespaces: list[str]) -> None:
    """Delete every DeepSeekServing and child kind in *namespaces* (not waiting), so that the
    next operator starts on the same cluster."""
    for ns in namespaces:
        cp.kubectl(
            "delete", f"{names.PLURAL},deployments,statefulsets,services", "--all", "-n", ns,
            "--wait=false", timeout=300, check=False,
        )  # fmt: skip


def pool_names(gb200_pools: int, h200_pools: int) -> list[str]:
    """The pool label values: ``gb200-<i>`` then ``h200-<i>``."""
    return [f"gb200-{i}" for i in range(gb200_pools)] + [f"h200-{i}" for i in range(h200_pools)]


def build_nodes(n: int, gb200_share: float, gb200_pools: int, h200_pools: int) -> list[dict]:
    """``n`` Ready GPU Nodes (GB200 first, then H200), round-robin over their pools.

    The kwok annotation is dropped (no kwok runs; nothing should touch them) and a
    ``Ready=True`` condition is added to the status the API server stores on create.
    """
    n_gb = round(n * gb200_share)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "benchmark node",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    nodes = []
    for i in range(n):
        if i < n_gb:
            pool = f"gb200-{i % gb200_pools}"
            node = make_gpu_node(
                f"gb200-{i:05d}", "NVIDIA-GB200", 4, (10, 0), GB200_AGENT, {"pool": pool}
            )
        else:
            pool = f"h200-{i % h200_pools}"
            node = make_gpu_node(
                f"h200-{i:05d}", "NVIDIA-H200", 8, (9, 0), H200_AGENT, {"pool": pool}
            )
        node["metadata"]["annotations"] = {}
        node["status"]["conditions"] = [ready]
        nodes.append(node)
    return nodes


def create_nodes(cp: ControlPlane, nodes: list[dict], threads: int) -> float:
    """Create *nodes* with *threads* concurrent POSTs; make sure status stuck; return seconds."""
    rest = Rest(cp)
    t0 = time.monotonic()

    def one(node: dict) -> None:
        created = rest.call("POST", "/api/v1/nodes", node)
        if not (created.get("status") or {}).get("conditions"):  # status dropped: write it
            name = node["metadata"]["name"]
            rest.call("PATCH", f"/api/v1/nodes/{name}/status", {"status": node["status"]})

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, nodes))
    return time.monotonic() - t0


def build_servings(count: int, namespaces: list[str], pools: list[str]) -> list[dict]:
    """``count`` copies of the seed DeepSeekServing: ``dss-<i>`` in namespace ``i % len``.

    Tolerations are dropped (the nodes have no taints), requests made small, and each selects
    pool ``i % len(pools)`` through ``spec.nodeSelector``.
    """
    seed = yaml.safe_load(SEED.read_text())
    out = []
    for i in range(count):
        doc = copy.deepcopy(seed)
        doc["metadata"] = {"name": f"dss-{i:04d}", "namespace": namespaces[i % len(namespaces)]}
        doc["spec"].pop("tolerations", None)
        doc["spec"]["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
        doc["spec"]["nodeSelector"] = {"pool": pools[i % len(pools)]}
        # A distinct spec each: the operator shares one decision between equal specs on the
        # same inventory, which copies of one spec would turn into a best case.
        doc["spec"]["model"]["servedModelName"] = f"dsv41-{i:04d}"
        out.append(doc)
    return out


class NoopOperatorProcess(OperatorProcess):
    """``kopf run --standalone -A --quiet bench/noop_operator.py`` with liveness and metrics."""

    def start(self) -> NoopOperatorProcess:
        """Start kopf on the no-op handler file and wait for its liveness endpoint."""
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "PYTHONUNBUFFERED": "1",
            "NOOP_METRICS_PORT": str(self.metrics_port),
        }
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "kopf", "run", "--standalone", "--all-namespaces",
                "--quiet", "--liveness", f"http://127.0.0.1:{self.health_port}/healthz",
                str(NOOP),
            ],
            env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT,
        )  # fmt: skip
        wait_for(self._healthy, timeout=60, what="no-op operator liveness")
        return self


def start_operator(cp: ControlPlane, name: str, log_dir: Path) -> OperatorProcess:
    """Start ``ours`` (``deepseek-operator run --standalone``) or ``noop``."""
    if name == "ours":
        return OperatorProcess(cp, log_dir).start()
    return NoopOperatorProcess(cp, log_dir).start()


def nodes_indexed(op: OperatorProcess) -> float:
    """The operator's ``deepseek_operator_nodes`` gauge (-1 while unreadable)."""
    try:
        text = op.metrics()
    except OSError:
        return -1.0
    for line in text.splitlines():
        if line.startswith("deepseek_operator_nodes "):
            return float(line.split()[1])
    return -1.0


def wait_indexed(op: OperatorProcess, nodes: int, timeout: float) -> None:
    """Wait until the operator's node index holds *nodes* Nodes (polled every 50 ms)."""
    deadline = time.monotonic() + timeout
    while nodes_indexed(op) != float(nodes):
        if op.proc is not None and op.proc.poll() is not None:
            raise RuntimeError(f"operator exited with {op.proc.returncode}:\n{op.logs()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"node index at {nodes_indexed(op):.0f}/{nodes} after {timeout}s")
        time.sleep(0.05)
