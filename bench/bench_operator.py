"""Benchmark of the operator at fleet scale (issue 13), against a no-op kopf baseline.

Everything runs on one local control plane (etcd + kube-apiserver from ``tests/k8s/cluster.py``;
no scheduler, controller-manager or kwok: the benchmark is about the decision, not scheduling).
GPU Nodes are created in bulk (60 % GB200 NVL4 trays with node-agent labels, 40 % H200, spread
over pools; no kwok, so nothing rewrites them). Two operators take turns, interleaved, on the same
cluster: ours (``deepseek-operator run --standalone``) and the no-op (``bench/noop_operator.py``:
a kopf operator that indexes every Node and writes one ``BackendResolved`` status per object).

1. Start-up sweep: for each ``--nodes`` count (the cluster grows between them), each operator is
   started ``--repeats`` times; start-up = process start until its ``deepseek_operator_nodes``
   gauge equals the node count. Its CPU seconds and peak RSS (``VmHWM``) at that moment too.
2. Latency: ``idle`` runs (``--idle-servings`` DeepSeekServings, one at a time, each created
   once the previous one is resolved; ``--idle-runs`` pairs, alternating which operator goes
   first) and, at the largest node count, ``burst`` runs (each ``--servings`` count created
   concurrently from ``--threads`` threads, or at ``--create-rate`` per second). Latency = until
   a watch (opened before) shows condition ``BackendResolved`` for the object's generation,
   counted from the object's create request and from its arrival (when it was due to be sent:
   the burst's start or its slot at ``--create-rate``). Per run: p50/p95/max, time until all
   are resolved, then, once the operator is quiet again, its CPU seconds and peak RSS,
   kube-apiserver + etcd CPU, API requests by verb and resource from kube-apiserver's
   ``/metrics`` (LISTs of nodes and deepseekservings must be 0: no LIST per reconcile), the
   1-minute load average before and after. Every object of a run is deleted before the next.

Goals (issue 13): start-up at 10,000 Nodes <= 2x the no-op's; idle p50 <= 1.5x, burst p95 <= 1.2x
the no-op's; 10,000 Nodes x 1,000 DeepSeekServings all resolved with RSS < 300 MB.

Run: ``make bench-operator`` (the full sweep, ~8 min on 2 cores) or e.g. ``.venv/bin/python
-m bench.bench_operator --nodes 1000 --servings 200 --repeats 1``; writes
``bench/results/operator-scale.json`` and ``.png``. Needs the binaries of ``make cluster-bins``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import http.client
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.gpu_nodes import HEALTHY_GB200_AGENT_LABELS, agent_labels, make_gpu_node
from tests.k8s.cluster import (
    CORE_BINARIES,
    ControlPlane,
    default_bin_dir,
    missing_binaries,
    wait_for,
)
from tests.k8s.operator import OperatorProcess, install_crds

ROOT = Path(__file__).resolve().parents[1]

GROUP, VERSION, PLURAL = "serving.deepseek-operator.io", "v1alpha1", "deepseekservings"
DSS_PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
SEED = ROOT / "examples" / "dsv41-flash-gb200.yaml"
NOOP = ROOT / "bench" / "noop_operator.py"
GB200_AGENT = HEALTHY_GB200_AGENT_LABELS
H200_AGENT = agent_labels("NVIDIA-H200")
TARGET_RATIO, TARGET_RSS_MB = 1.5, 200.0


# --------------------------------------------------------------------------------------------
# Cluster objects
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------


def resolved_generation(obj: Mapping[str, Any]) -> bool:
    """Whether *obj* has condition BackendResolved for its current ``metadata.generation``."""
    generation = (obj.get("metadata") or {}).get("generation")
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "BackendResolved":
            return bool(cond.get("observedGeneration") == generation)
    return False


class ResolvedWatcher(threading.Thread):
    """Watches every DeepSeekServing from a resourceVersion; timestamps the first resolution.

    ``resolved[(namespace, name)] = (monotonic time, condition status)`` for objects in
    *namespaces*; ``done`` is set once *expected* of them are resolved.
    """

    def __init__(self, cp: ControlPlane, namespaces: Iterable[str], expected: int) -> None:
        """Prepare the watch (a LIST for the starting resourceVersion, before measuring)."""
        super().__init__(daemon=True, name="dss-watch")
        self.rest = Rest(cp)
        self.namespaces = set(namespaces)
        self.expected = expected
        self.resolved: dict[tuple[str, str], tuple[float, str]] = {}
        self.done = threading.Event()
        self.changed = threading.Condition()
        self.connected = threading.Event()
        self.error: BaseException | None = None
        self.stopping = False
        listing = self.rest.call("GET", f"{DSS_PATH}?limit=1")
        self.resource_version = listing["metadata"]["resourceVersion"]
        self.conn: http.client.HTTPSConnection | None = self.rest.connection(timeout=None)
        self.catch_ups = 0

    def run(self) -> None:
        """Stream events until stopped; record each object's first resolved moment.

        The API server ends a watch whose reader falls behind (a busy 2-core machine during a
        burst): the watch is resumed from the last version seen; if that version is gone, a
        LIST catches up (those objects are timestamped when the LIST answers: late, never early).
        """
        try:
            while not self.stopping and len(self.resolved) < self.expected:
                if self.conn is None:
                    self.conn = self.rest.connection(timeout=None)
                resp = self.rest.send(
                    self.conn,
                    "GET",
                    f"{DSS_PATH}?watch=true&resourceVersion={self.resource_version}"
                    "&allowWatchBookmarks=true&timeoutSeconds=1800",
                )
                if resp.status == 410:
                    resp.read()
                    self.catch_up()
                    continue
                if resp.status != 200:
                    raise RuntimeError(f"watch: {resp.status} {resp.read()[:500]!r}")
                self.connected.set()
                event: dict[str, Any] = {}
                for line in resp:
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        break  # expired: the next request answers 410 or resumes
                    self.resource_version = (obj.get("metadata") or {}).get(
                        "resourceVersion", self.resource_version
                    )
                    if event.get("type") not in ("BOOKMARK", "DELETED"):
                        self.observe(obj, time.monotonic())
                if event.get("type") == "ERROR":
                    self.catch_up()
                self.conn.close()
                self.conn = None
        except BaseException as exc:  # reported by the phase
            if not self.stopping:
                self.error = exc
        finally:
            self.done.set()

    def observe(self, obj: Mapping[str, Any], now: float) -> None:
        """Record *obj*'s resolution at *now* if it is the first one seen."""
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace"), meta.get("name"))
        if key[0] not in self.namespaces or key in self.resolved or not resolved_generation(obj):
            return
        status = next(
            c.get("status")
            for c in obj["status"]["conditions"]
            if c.get("type") == "BackendResolved"
        )
        with self.changed:
            self.resolved[key] = (now, str(status))
            self.changed.notify_all()
        if len(self.resolved) >= self.expected:
            self.done.set()

    def catch_up(self) -> None:
        """LIST every DeepSeekServing; record the resolved ones; resume from the list."""
        self.catch_ups += 1
        listing = self.rest.call("GET", DSS_PATH)
        now = time.monotonic()
        for obj in listing.get("items") or []:
            self.observe(obj, now)
        self.resource_version = listing["metadata"]["resourceVersion"]

    def wait_for(self, key: tuple[str, str], timeout: float) -> bool:
        """Block until *key* is resolved (True) or *timeout* seconds pass (False)."""
        with self.changed:
            return (
                self.changed.wait_for(
                    lambda: key in self.resolved or self.error is not None, timeout
                )
                and key in self.resolved
            )

    def stop(self) -> None:
        """Close the stream."""
        self.stopping = True
        conn = self.conn
        if conn is None:
            return
        with contextlib.suppress(OSError):
            if conn.sock is not None:
                conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()


def parse_prometheus(text: str, names: Iterable[str]) -> dict[tuple[str, frozenset], float]:
    """Samples of the metrics *names* as ``{(sample name, frozenset(labels)): value}``."""
    from prometheus_client.parser import text_string_to_metric_families

    prefixes = tuple(names)
    wanted = "\n".join(
        line for line in text.splitlines() if line.startswith(prefixes) or line.startswith("#")
    )
    out: dict[tuple[str, frozenset], float] = {}
    for family in text_string_to_metric_families(wanted + "\n"):
        for s in family.samples:
            if s.name.startswith(prefixes):
                out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def scrape_apiserver(cp: ControlPlane) -> dict[tuple[str, frozenset], float]:
    """``apiserver_request_total`` samples of kube-apiserver (admin token)."""
    req = urllib.request.Request(f"{cp.server}/metrics")
    req.add_header("Authorization", f"Bearer {cp.token}")
    ctx = ssl.create_default_context(cafile=str(cp.ca_file))
    with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:
        text = resp.read().decode()
    return parse_prometheus(text, ["apiserver_request_total"])


def apiserver_delta(
    before: Mapping[tuple[str, frozenset], float], after: Mapping[tuple[str, frozenset], float]
) -> dict[str, int]:
    """Requests made between two scrapes, by ``VERB resource[/subresource]`` (codes summed)."""
    out: Counter[str] = Counter()
    for key, value in after.items():
        delta = value - before.get(key, 0.0)
        if delta <= 0:
            continue
        labels = dict(key[1])
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        out[f"{labels.get('verb', '?')} {resource}"] += int(delta)
    return dict(sorted(out.items()))


def operator_counters(text: str) -> dict[str, float]:
    """Our operator's counters as ``{"name{k=v,...}": value}`` (``_total`` and histogram sums)."""
    samples = parse_prometheus(
        text,
        [
            "deepseek_operator_reconciles_total",
            "deepseek_operator_api_requests_total",
            "deepseek_operator_child_applies_total",
            "deepseek_operator_reconcile_duration_seconds_sum",
            "deepseek_operator_reconcile_duration_seconds_count",
        ],
    )
    out = {}
    for (name, labels), value in samples.items():
        tag = ",".join(f"{k}={v}" for k, v in sorted(labels))
        out[f"{name}{{{tag}}}" if tag else name] = value
    return out


def proc_rss_peak_mb(pid: int) -> float:
    """``VmHWM`` (peak resident set size) of *pid* in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used by *pid* so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def control_plane_cpu(cp: ControlPlane) -> float:
    """CPU seconds used so far by etcd and kube-apiserver together."""
    return sum(proc_cpu_seconds(c.process.pid) for c in cp.components if c.process is not None)


def percentile(values: list[float], q: float) -> float:
    """The *q*-quantile (0..1) of *values*, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


# --------------------------------------------------------------------------------------------
# Operators
# --------------------------------------------------------------------------------------------


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


def settle_quiet(pid: int, timeout: float, busy_share: float = 0.03) -> None:
    """Wait (up to *timeout*) until process *pid* uses under *busy_share* of a core over a
    second."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        before = proc_cpu_seconds(pid)
        time.sleep(1.0)
        if proc_cpu_seconds(pid) - before < busy_share:
            return


def load_average() -> float:
    """The 1-minute load average (the machine is shared; every figure carries it)."""
    return os.getloadavg()[0]


@dataclass
class StartupResult:
    """One operator start: process start until its node index holds every Node."""

    operator: str
    nodes: int
    startup_s: float = float("nan")
    cpu_s: float = float("nan")  # the operator's CPU seconds until indexed
    rss_peak_mb: float = float("nan")
    load_before: float = float("nan")
    load_after: float = float("nan")
    error: str = ""


def measure_startup(
    cp: ControlPlane, name: str, nodes: int, log_dir: Path, timeout: float
) -> StartupResult:
    """Start one operator, time it until every Node is indexed, stop it."""
    result = StartupResult(name, nodes, load_before=load_average())
    t0 = time.monotonic()
    op = start_operator(cp, name, log_dir)
    assert op.proc is not None
    try:
        wait_indexed(op, nodes, timeout)
        result.startup_s = time.monotonic() - t0
        result.cpu_s = proc_cpu_seconds(op.proc.pid)
        result.rss_peak_mb = proc_rss_peak_mb(op.proc.pid)
    except (TimeoutError, RuntimeError) as exc:
        result.error = str(exc)[:500]
        print(f"[{name} start-up @{nodes}] {result.error}", file=sys.stderr)
    finally:
        op.stop()
    result.load_after = load_average()
    return result


@dataclass
class PhaseResult:
    """The figures of one operator's latency run (``burst`` or ``idle``)."""

    name: str
    mode: str
    nodes: int
    servings: int
    resolved: int = 0
    resolved_true: int = 0
    latencies_s: list[float] = field(default_factory=list)  # from each object's create request
    # From when each object was due to be sent: the burst's start (or its slot at a fixed
    # rate). A closed-loop creator sends the next object only when the API server has taken the
    # last, so its own create time hides the wait of an object still in the client.
    arrival_latencies_s: list[float] = field(default_factory=list)
    create_wall_s: float = 0.0
    total_s: float = 0.0
    rss_peak_mb: float = 0.0
    cpu_s: float = 0.0
    server_cpu_s: float = 0.0
    load_before: float = float("nan")
    load_after: float = float("nan")
    apiserver: dict[str, int] = field(default_factory=dict)
    operator_metrics: dict[str, float] = field(default_factory=dict)
    watch_catch_ups: int = 0  # the benchmark's own LISTs of DeepSeekServings
    log_path: str = ""
    error: str = ""

    def summary(self) -> dict[str, Any]:
        """The JSON-able figures (latencies as p50/p95/max)."""
        lat = self.latencies_s or [float("nan")]
        arrival = self.arrival_latencies_s or [float("nan")]
        return {
            "operator": self.name,
            "mode": self.mode,
            "nodes": self.nodes,
            "servings": self.servings,
            "resolved": self.resolved,
            "resolved_true": self.resolved_true,
            "p50_s": statistics.median(lat),
            "p95_s": percentile(lat, 0.95),
            "max_s": max(lat),
            "p50_from_arrival_s": statistics.median(arrival),
            "p95_from_arrival_s": percentile(arrival, 0.95),
            "create_wall_s": self.create_wall_s,
            "total_s": self.total_s,
            "rss_peak_mb": self.rss_peak_mb,
            "cpu_s": self.cpu_s,
            "apiserver_etcd_cpu_s": self.server_cpu_s,
            "load_before": self.load_before,
            "load_after": self.load_after,
            "list_nodes": _verb_count(self.apiserver, "LIST", "nodes"),
            # The benchmark's own catch-up LISTs are not the operator's.
            "list_dss": _verb_count(self.apiserver, "LIST", "deepseekservings")
            - self.watch_catch_ups,
            "watch_catch_ups": self.watch_catch_ups,
            "apiserver_requests": self.apiserver,
            "operator_metrics": self.operator_metrics,
            "log": self.log_path,
            "error": self.error,
        }


def _verb_count(requests: Mapping[str, int], verb: str, resource: str) -> int:
    return sum(v for k, v in requests.items() if k == f"{verb} {resource}")


def warm_up(cp: ControlPlane, doc: Mapping[str, Any], namespace: str) -> None:
    """Create one copy of *doc* in *namespace* and wait until it is resolved (not measured).

    A fresh process pays one-off costs on its first object (API discovery, connections,
    lazy imports); a long-running operator on an idle cluster has paid them long ago.
    """
    warm = copy.deepcopy(dict(doc))
    warm["metadata"] = {"name": "warm-up", "namespace": namespace}
    rest = Rest(cp)
    rest.call("POST", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}", warm)
    wait_for(
        lambda: resolved_generation(
            rest.call("GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/warm-up")
        ),
        timeout=120,
        what="warm-up DeepSeekServing resolved",
    )


def run_phase(
    cp: ControlPlane,
    name: str,
    mode: str,
    servings: list[dict],
    *,
    nodes: int,
    log_dir: Path,
    threads: int,
    timeout: float,
    settle: float,
    index_timeout: float,
    create_rate: float = 0.0,
) -> PhaseResult:
    """Start one operator, create *servings*, time their resolution, stop it, clean up.

    ``burst``: all created concurrently from *threads* threads, as fast as the API server takes
    them, or (*create_rate* > 0) the i-th sent at i / *create_rate* seconds (the same arrival
    rate whichever operator runs). ``idle``: one at a time, each created only once the previous
    one is resolved (the latency of a quiet cluster).
    Afterwards every DeepSeekServing of the phase and every child is deleted, so the next
    operator starts on the same cluster.
    """
    namespaces = sorted({s["metadata"]["namespace"] for s in servings})
    warm_ns = f"{namespaces[0]}-warm"
    cp.kubectl("create", "namespace", warm_ns)
    result = PhaseResult(name, mode, nodes, len(servings), load_before=load_average())
    op = start_operator(cp, name, log_dir)
    assert op.proc is not None
    pid = op.proc.pid
    result.log_path = str(op.log_path)
    try:
        try:
            wait_indexed(op, nodes, index_timeout)
        except (TimeoutError, RuntimeError) as exc:
            result.error = str(exc)[:500]
            print(f"[{name} {mode}] {result.error}", file=sys.stderr)
            return result
        time.sleep(2.0)  # let the initial listings settle
        warm_up(cp, servings[0], warm_ns)
        watcher = ResolvedWatcher(cp, namespaces, len(servings))
        watcher.start()
        watcher.connected.wait(10)
        time.sleep(1.0)  # the watch request is on the wire
        api_before = scrape_apiserver(cp)
        op_before = operator_counters(op.metrics()) if name == "ours" else {}
        cpu_before = proc_cpu_seconds(pid)
        server_cpu_before = control_plane_cpu(cp)

        rest = Rest(cp)
        sent: dict[tuple[str, str], float] = {}
        due: dict[tuple[str, str], float] = {}

        def create(doc: dict, due_at: float | None = None) -> None:
            meta = doc["metadata"]
            path = f"/apis/{GROUP}/{VERSION}/namespaces/{meta['namespace']}/{PLURAL}"
            key = (meta["namespace"], meta["name"])
            sent[key] = time.monotonic()
            due[key] = sent[key] if due_at is None else due_at
            rest.call("POST", path, doc)

        t0 = time.monotonic()

        def paced(numbered: tuple[int, dict]) -> None:
            i, doc = numbered
            due_at = t0 + i / create_rate if create_rate > 0 else t0
            time.sleep(max(0.0, due_at - time.monotonic()))
            create(doc, due_at)

        if mode == "burst":
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(paced, enumerate(servings)))
        else:
            for doc in servings:
                create(doc)
                key = (doc["metadata"]["namespace"], doc["metadata"]["name"])
                if not watcher.wait_for(key, timeout):
                    break
        result.create_wall_s = time.monotonic() - t0
        finished = watcher.done.wait(timeout)
        t_done = max((t for t, _ in watcher.resolved.values()), default=time.monotonic())
        result.total_s = t_done - t0
        if watcher.error is not None:
            raise RuntimeError(f"watch failed: {watcher.error!r}")
        if not finished:
            result.error = f"only {len(watcher.resolved)}/{len(servings)} resolved in {timeout}s"
            print(f"[{name} {mode}] {result.error}", file=sys.stderr)
        # Trailing work (child applies queued behind status writes, child events, kopf
        # annotations) lands in the counts: wait until the operator is quiet.
        time.sleep(settle)
        settle_quiet(pid, timeout)
        result.cpu_s = proc_cpu_seconds(pid) - cpu_before
        result.server_cpu_s = control_plane_cpu(cp) - server_cpu_before
        result.apiserver = apiserver_delta(api_before, scrape_apiserver(cp))
        if name == "ours":
            after = operator_counters(op.metrics())
            result.operator_metrics = {
                k: v - op_before.get(k, 0.0) for k, v in after.items() if v != op_before.get(k)
            }
        result.rss_peak_mb = proc_rss_peak_mb(pid)
        watcher.stop()
        result.watch_catch_ups = watcher.catch_ups
        result.resolved = len(watcher.resolved)
        result.resolved_true = sum(1 for _, s in watcher.resolved.values() if s == "True")
        result.latencies_s = [t - sent[key] for key, (t, _) in watcher.resolved.items()]
        result.arrival_latencies_s = [t - due[key] for key, (t, _) in watcher.resolved.items()]
    finally:
        op.stop()
        result.load_after = load_average()
        for ns in [*namespaces, warm_ns]:
            cp.kubectl(
                "delete", "dss,deployments,statefulsets,services", "--all", "-n", ns,
                "--wait=false", timeout=300, check=False,
            )  # fmt: skip
    return result


def measure_restart(
    cp: ControlPlane,
    name: str,
    servings: list[dict],
    *,
    nodes: int,
    log_dir: Path,
    threads: int,
    timeout: float,
    index_timeout: float,
) -> dict[str, Any]:
    """Restart with *servings* in place: process start until a DeepSeekServing created right
    after it (once its liveness endpoint answers) is resolved.

    The operator first creates and resolves every one of *servings*, is stopped (SIGTERM) and
    started again; the new process resumes each of them while the probe object waits its turn.
    """
    namespaces = sorted({s["metadata"]["namespace"] for s in servings})
    out: dict[str, Any] = {"operator": name, "nodes": nodes, "servings": len(servings)}
    rest = Rest(cp)
    op = start_operator(cp, name, log_dir)
    try:
        wait_indexed(op, nodes, index_timeout)
        watcher = ResolvedWatcher(cp, namespaces, len(servings))
        watcher.start()
        watcher.connected.wait(10)
        with ThreadPoolExecutor(threads) as pool:
            list(
                pool.map(
                    lambda doc: rest.call(
                        "POST",
                        f"/apis/{GROUP}/{VERSION}/namespaces/{doc['metadata']['namespace']}/"
                        f"{PLURAL}",
                        doc,
                    ),
                    servings,
                )
            )
        finished = watcher.done.wait(timeout)
        watcher.stop()
        if not finished:
            out["error"] = f"only {len(watcher.resolved)}/{len(servings)} resolved before restart"
            return out
    finally:
        op.stop()
    probe = copy.deepcopy(servings[0])
    probe["metadata"] = {"name": "after-restart", "namespace": namespaces[0]}
    probe["spec"]["model"]["servedModelName"] = "after-restart"
    out["load_before"] = load_average()
    t0 = time.monotonic()
    op = start_operator(cp, name, log_dir)
    assert op.proc is not None
    try:
        out["healthy_s"] = time.monotonic() - t0
        watcher = ResolvedWatcher(cp, [namespaces[0]], 1)
        watcher.start()
        watcher.connected.wait(10)
        created = time.monotonic()
        rest.call("POST", f"/apis/{GROUP}/{VERSION}/namespaces/{namespaces[0]}/{PLURAL}", probe)
        if watcher.wait_for((namespaces[0], "after-restart"), timeout):
            resolved = watcher.resolved[(namespaces[0], "after-restart")][0]
            out["new_object_s"] = resolved - t0  # process start until acted on
            out["new_object_after_create_s"] = resolved - created
        else:
            out["error"] = f"the new object was not resolved within {timeout}s"
        watcher.stop()
        out["cpu_s"] = proc_cpu_seconds(op.proc.pid)
        out["rss_peak_mb"] = proc_rss_peak_mb(op.proc.pid)
    finally:
        op.stop()
        out["load_after"] = load_average()
        for ns in namespaces:
            cp.kubectl(
                "delete", "dss,deployments,statefulsets,services", "--all", "-n", ns,
                "--wait=false", timeout=300, check=False,
            )  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def ratio(ours: float, noop: float) -> float:
    """ours / noop (nan when either is missing)."""
    return ours / noop if noop and noop == noop and ours == ours else float("nan")


def print_report(out: Mapping[str, Any]) -> None:
    """Print the start-up and latency tables."""
    print("\nstart-up (process start until every Node is indexed), median over repeats:")
    print(f"{'nodes':>6} {'ours s':>7} {'noop s':>7} {'ratio':>6} {'ours cpu':>8} "
          f"{'noop cpu':>8} {'ours MB':>7} {'noop MB':>7} {'load':>5}")  # fmt: skip
    for row in out["startup_summary"]:
        print(
            f"{row['nodes']:>6} {row['ours_s']:>7.2f} {row['noop_s']:>7.2f} "
            f"{row['ratio']:>6.2f} {row['ours_cpu_s']:>8.2f} {row['noop_cpu_s']:>8.2f} "
            f"{row['ours_rss_mb']:>7.0f} {row['noop_rss_mb']:>7.0f} {row['load']:>5.1f}"
        )
    print("\napply -> BackendResolved latency (ours vs noop, same cluster, interleaved):")
    header = (
        f"{'mode':<5} {'nodes':>6} {'CRs':>5} {'op':<5} {'resolved':>9} {'p50 s':>7} "
        f"{'p95 s':>7} {'arr p50':>7} {'arr p95':>7} {'sent s':>7} {'all s':>7} {'cpu s':>6} "
        f"{'srv cpu':>7} {'RSS MB':>7} "
        f"{'LIST n/dss':>10} {'load':>9}"
    )
    print(header)
    print("-" * len(header))
    for r in out["latency"]:
        if r["error"] and not r["resolved"]:
            print(f"{r['mode']:<5} {r['nodes']:>6} {r['servings']:>5} {r['operator']:<5} "
                  f"FAILED: {r['error']}")  # fmt: skip
            continue
        print(
            f"{r['mode']:<5} {r['nodes']:>6} {r['servings']:>5} {r['operator']:<5} "
            f"{r['resolved']:>4}/{r['servings']:<4} {r['p50_s']:>7.3f} {r['p95_s']:>7.3f} "
            f"{r['p50_from_arrival_s']:>7.3f} {r['p95_from_arrival_s']:>7.3f} "
            f"{r['create_wall_s']:>7.2f} {r['total_s']:>7.2f} {r['cpu_s']:>6.1f} "
            f"{r['apiserver_etcd_cpu_s']:>7.1f} "
            f"{r['rss_peak_mb']:>7.0f} {r['list_nodes']:>4}/{r['list_dss']:<5} "
            f"{r['load_before']:>4.1f}-{r['load_after']:<4.1f}"
        )
    for r in out.get("restart") or []:
        print(
            f"\nrestart {r['operator']} with {r['servings']} DeepSeekServings @{r['nodes']} "
            f"nodes: new object acted on {r.get('new_object_s', float('nan')):.1f} s after the "
            f"process start ({r.get('new_object_after_create_s', float('nan')):.1f} s after its "
            f"create), CPU {r.get('cpu_s', float('nan')):.1f} s, load "
            f"{r.get('load_before', float('nan')):.1f} {r.get('error', '')}"
        )
    print("\nratios ours/noop:")
    for row in out["ratios"]:
        print(
            f"  {row['mode']:<5} {row['nodes']:>6} nodes {row['servings']:>5} CRs: "
            f"p50 {row['p50_ratio']:.2f}x  p95 {row['p95_ratio']:.2f}x  from arrival: p50 "
            f"{row['arrival_p50_ratio']:.2f}x  p95 {row['arrival_p95_ratio']:.2f}x  all "
            f"{row['all_ratio']:.2f}x"
        )
    print(
        "  (p50/p95: from each object's create request; from arrival: from when it was due to be"
        " sent, the burst's start or its slot at --create-rate; all: first create to last"
        " resolved)"
    )


def summarise(startups: list[StartupResult], latency: list[PhaseResult]) -> dict[str, Any]:
    """Medians of the start-ups per node count, latency rows, ours/noop ratios."""
    startup_summary = []
    for nodes in sorted({r.nodes for r in startups}):

        def med(op: str, attr: str, n: int = nodes) -> float:
            values = [getattr(r, attr) for r in startups if r.nodes == n and r.operator == op]
            values = [v for v in values if v == v]
            return statistics.median(values) if values else float("nan")

        loads = [r.load_before for r in startups if r.nodes == nodes]
        startup_summary.append(
            {
                "nodes": nodes,
                "ours_s": med("ours", "startup_s"),
                "noop_s": med("noop", "startup_s"),
                "ratio": ratio(med("ours", "startup_s"), med("noop", "startup_s")),
                "ours_cpu_s": med("ours", "cpu_s"),
                "noop_cpu_s": med("noop", "cpu_s"),
                "ours_rss_mb": med("ours", "rss_peak_mb"),
                "noop_rss_mb": med("noop", "rss_peak_mb"),
                "load": statistics.median(loads) if loads else float("nan"),
            }
        )
    rows = [r.summary() for r in latency]
    ratios = []
    # The k-th run of ours under one (mode, nodes, CRs) against the k-th run of the no-op.
    runs: dict[tuple[str, str, int, int], list[dict[str, Any]]] = {}
    for r in rows:
        runs.setdefault((r["operator"], r["mode"], r["nodes"], r["servings"]), []).append(r)
    for (op, mode, nodes, servings), ours_runs in runs.items():
        if op != "ours":
            continue
        for r, noop in zip(ours_runs, runs.get(("noop", mode, nodes, servings), []), strict=False):
            ratios.append(
                {
                    "mode": mode,
                    "nodes": nodes,
                    "servings": servings,
                    "p50_ratio": ratio(r["p50_s"], noop["p50_s"]),
                    "p95_ratio": ratio(r["p95_s"], noop["p95_s"]),
                    "arrival_p50_ratio": ratio(r["p50_from_arrival_s"], noop["p50_from_arrival_s"]),
                    "arrival_p95_ratio": ratio(r["p95_from_arrival_s"], noop["p95_from_arrival_s"]),
                    "all_ratio": ratio(r["total_s"], noop["total_s"]),
                }
            )
    return {
        "startup": [vars(r) for r in startups],
        "startup_summary": startup_summary,
        "latency": rows,
        "ratios": ratios,
    }


def plot(out: Mapping[str, Any], path: Path) -> None:
    """Start-up vs Nodes, burst latency (and time until all are resolved) vs DeepSeekServings,
    peak RSS: ours vs the no-op."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 4.8))
    colours = {"ours": "tab:blue", "noop": "tab:gray"}
    summary = out["startup_summary"]
    nodes = [row["nodes"] for row in summary]
    for op in ("ours", "noop"):
        ax1.plot(nodes, [row[f"{op}_s"] for row in summary], "o-", color=colours[op], label=op)
        raw = [r for r in out["startup"] if r["operator"] == op]
        ax1.scatter([r["nodes"] for r in raw], [r["startup_s"] for r in raw], s=10,
                    color=colours[op], alpha=0.4)  # fmt: skip
    ax1.set(title="start-up: process start → every Node indexed", xlabel="Nodes",
            ylabel="seconds")  # fmt: skip
    ax1.legend()
    burst = [r for r in out["latency"] if r["mode"] == "burst"]
    for op in ("ours", "noop"):
        rows = sorted((r for r in burst if r["operator"] == op), key=lambda r: r["servings"])
        crs = [r["servings"] for r in rows]
        ax2.plot(crs, [r["p50_s"] for r in rows], "o-", color=colours[op], label=f"{op} p50")
        ax2.plot(crs, [r["p95_s"] for r in rows], "s--", color=colours[op], label=f"{op} p95")
        ax2.plot(crs, [r["p95_from_arrival_s"] for r in rows], "^:", color=colours[op],
                 label=f"{op} p95 from the burst's start")  # fmt: skip
        ax3.plot(crs, [r["rss_peak_mb"] for r in rows], "o-", color=colours[op], label=op)
    burst_nodes = burst[0]["nodes"] if burst else 0
    ax2.set(title=f"burst apply → BackendResolved ({burst_nodes} Nodes)",
            xlabel="DeepSeekServings created at once", ylabel="seconds")  # fmt: skip
    ax2.legend()
    ax3.axhline(300, color="tab:red", linestyle=":", label="goal 300 MB")
    ax3.set(title=f"operator peak RSS ({burst_nodes} Nodes)", xlabel="DeepSeekServings",
            ylabel="MB")  # fmt: skip
    ax3.legend()
    idle = [
        f"{row['nodes']} Nodes p50 {row['p50_ratio']:.2f}x / p95 {row['p95_ratio']:.2f}x"
        for row in out["ratios"]
        if row["mode"] == "idle"
    ]
    fig.suptitle(
        f"idle (one at a time) ours/no-op: {'; '.join(idle) or 'not run'}   |   "
        f"{out['conditions']}",
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def int_list(text: str) -> list[int]:
    """``1000,2500`` → ``[1000, 2500]``."""
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line flags (defaults: the full sweep of issue 13)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int_list, default=[1000, 2500, 5000, 10000],
                   help="node counts for the start-up sweep; latency runs at the last")  # fmt: skip
    p.add_argument("--servings", type=int_list, default=[100, 500, 1000],
                   help="DeepSeekServings per burst run")  # fmt: skip
    p.add_argument("--idle-servings", type=int, default=30,
                   help="DeepSeekServings of each idle run, one at a time (0: none)")  # fmt: skip
    p.add_argument("--idle-at", type=int_list, default=None,
                   help="node counts with an idle run (default: the smallest and the largest)")  # fmt: skip
    p.add_argument(
        "--idle-runs",
        type=int,
        default=2,
        help="idle pairs per size, alternating which operator goes first",
    )
    p.add_argument("--repeats", type=int, default=2, help="start-ups per operator and node count")
    p.add_argument("--restart-servings", type=int, default=1000,
                   help="DeepSeekServings in place for the restart run (0: none)")  # fmt: skip
    p.add_argument("--namespaces", type=int, default=4, help="namespaces per phase")
    p.add_argument("--gb200-share", type=float, default=0.6, help="share of GB200 nodes")
    p.add_argument("--gb200-pools", type=int, default=3, help="pools of GB200 nodes")
    p.add_argument("--h200-pools", type=int, default=2, help="pools of H200 nodes")
    p.add_argument("--threads", type=int, default=16, help="concurrent create requests")
    p.add_argument("--create-rate", type=float, default=0.0,
                   help="burst runs send this many creates per second (0: as fast as the "
                        "threads go, so the arrival rate depends on the operator's load)")  # fmt: skip
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait per phase")
    p.add_argument("--index-timeout", type=float, default=600.0,
                   help="seconds an operator may take to index every node")  # fmt: skip
    p.add_argument("--settle", type=float, default=3.0, help="seconds counted after the last")
    p.add_argument("--warmup", type=int, default=5, help="DSS created+deleted before measuring")
    p.add_argument("--work-dir", type=Path, default=None, help="keep cluster files here")
    p.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "operator-scale.json",
                   help="write the figures here")  # fmt: skip
    p.add_argument("--plot", type=Path, default=ROOT / "bench" / "results" / "operator-scale.png",
                   help="write the plot here (needs matplotlib, in the dev extras)")  # fmt: skip
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Start the control plane; sweep start-up over node counts, then latency; report and plot."""
    args = parse_args(argv)
    bin_dir = default_bin_dir()
    missing = missing_binaries(CORE_BINARIES, bin_dir)
    if missing:
        print(f"missing {missing} in {bin_dir}: run `make cluster-bins`", file=sys.stderr)
        return 2
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="dso-bench-"))
    cp = ControlPlane(bin_dir=bin_dir, work_dir=work)
    t_start = time.monotonic()
    try:
        cp.start()
        os.environ["KUBECONFIG"] = str(cp.kubeconfig)  # nothing reaches a real cluster
        install_crds(cp)
        pools = pool_names(args.gb200_pools, args.h200_pools)
        log_dir = work / "operator-logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        cp.kubectl("create", "namespace", "bench-warmup")
        if args.warmup:  # first writes of a new resource type pay one-off costs in the server
            cp.apply(build_servings(args.warmup, ["bench-warmup"], pools))
            cp.kubectl("delete", "dss", "--all", "-n", "bench-warmup")

        all_nodes = build_nodes(max(args.nodes), args.gb200_share, args.gb200_pools,
                                args.h200_pools)  # fmt: skip
        # Same names and pools at every size: grow the cluster by creating the missing Nodes.
        by_name = {n["metadata"]["name"]: n for n in all_nodes}
        order = sorted(by_name, key=lambda name: int(name.split("-")[1]))
        created = 0
        startups: list[StartupResult] = []
        latency: list[PhaseResult] = []
        node_create_s: dict[int, float] = {}
        idle_at = set(args.idle_at or [min(args.nodes), max(args.nodes)])

        def latency_pair(mode: str, count: int, first: str) -> None:
            """One run of each operator, *first* first (alternated to cancel drift)."""
            for op in (first, "noop" if first == "ours" else "ours"):
                run = len(latency)  # the same count may be measured more than once
                namespaces = [
                    f"bench-{mode}{count}-{created}-{op}-r{run}-{k}" for k in range(args.namespaces)
                ]
                for ns in namespaces:
                    cp.kubectl("create", "namespace", ns)
                print(f"{mode} {count} CRs @{created} nodes: {op} ...", file=sys.stderr)
                latency.append(
                    run_phase(
                        cp, op, mode, build_servings(count, namespaces, pools),
                        nodes=created, log_dir=log_dir, threads=args.threads,
                        timeout=args.timeout, settle=args.settle,
                        index_timeout=args.index_timeout, create_rate=args.create_rate,
                    )
                )  # fmt: skip
                r = latency[-1].summary()
                print(f"  {r['resolved']}/{count} p50 {r['p50_s']:.3f}s p95 {r['p95_s']:.3f}s "
                      f"RSS {r['rss_peak_mb']:.0f} MB load {r['load_before']:.1f}",
                      file=sys.stderr)  # fmt: skip

        for count in sorted(args.nodes):
            batch = [by_name[name] for name in order[created:count]]
            node_create_s[count] = create_nodes(cp, batch, args.threads)
            created = count
            print(f"{created} nodes ({node_create_s[count]:.1f}s to create)", file=sys.stderr)
            for rep in range(args.repeats):
                pair = ("ours", "noop") if rep % 2 == 0 else ("noop", "ours")
                for op in pair:
                    startups.append(measure_startup(cp, op, created, log_dir, args.index_timeout))
                    r = startups[-1]
                    print(f"  start-up {op:<4} {r.startup_s:6.2f}s load {r.load_before:.1f}",
                          file=sys.stderr)  # fmt: skip
            if args.idle_servings and count in idle_at:
                for run in range(args.idle_runs):
                    latency_pair("idle", args.idle_servings, "ours" if run % 2 == 0 else "noop")

        for i, count in enumerate(args.servings):
            latency_pair("burst", count, "ours" if i % 2 == 0 else "noop")

        restarts = []
        for op in ("ours", "noop") if args.restart_servings else ():
            namespaces = [f"bench-restart-{op}-{k}" for k in range(args.namespaces)]
            for ns in namespaces:
                cp.kubectl("create", "namespace", ns)
            print(f"restart with {args.restart_servings} CRs @{created} nodes: {op} ...",
                  file=sys.stderr)  # fmt: skip
            restarts.append(
                measure_restart(
                    cp, op, build_servings(args.restart_servings, namespaces, pools),
                    nodes=created, log_dir=log_dir, threads=args.threads,
                    timeout=args.timeout, index_timeout=args.index_timeout,
                )
            )  # fmt: skip
            print(f"  {restarts[-1]}", file=sys.stderr)

        out = summarise(startups, latency)
        out["restart"] = restarts
        loads = [r.load_before for r in startups] + [r.load_before for r in latency]
        loads += [r.load_after for r in startups] + [r.load_after for r in latency]
        out["conditions"] = (
            f"{os.cpu_count()} cores shared with other work, load "
            f"{min(loads, default=float('nan')):.1f}-{max(loads, default=float('nan')):.1f}"
        )
        out["setup"] = {
            "node_create_s": node_create_s,
            "pools": pools,
            "gb200_share": args.gb200_share,
            "work_dir": str(work),
            "cpus": os.cpu_count(),
            "args": {k: str(v) for k, v in vars(args).items()},
        }
        print_report(out)
        print(f"\nwall time {time.monotonic() - t_start:.0f}s; cluster files in {work}")
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2, default=str))
        if args.plot:
            plot(out, args.plot)
        print(f"wrote {args.json} and {args.plot}")
        return 0
    finally:
        with contextlib.suppress(Exception):
            cp.stop()


if __name__ == "__main__":
    raise SystemExit(main())
