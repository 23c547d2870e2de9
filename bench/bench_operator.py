"""Benchmark of the operator on a local control plane (issue 4), against a no-op kopf baseline.

What it does, in one run on one cluster (etcd + kube-apiserver from ``tests/k8s/cluster.py``; no
scheduler, controller-manager or kwok: the benchmark is about the decision, not scheduling):

1. Creates ``--nodes`` GPU Nodes in bulk (threads, one POST each, status written on create and
   checked): 60 % GB200 NVL4 trays with node-agent labels (sm100, cc 10.0, NVLink fully
   connected, 4 GPUs), 40 % H200 (sm90, 8 GPUs), spread over pools (label ``pool``). They are
   not annotated for kwok, so nothing rewrites them: Ready=True and allocatable stay as written.
2. For each operator in turn (ours: ``deepseek-operator run --standalone``; then the no-op kopf
   operator ``bench/noop_operator.py`` that writes one status condition), starts the operator,
   waits until it has listed every Node, then creates ``--servings`` DeepSeekServings (the seed
   example, one per name, spread over ``--namespaces`` namespaces, each selecting one pool)
   concurrently from ``--threads`` threads, and timestamps, with a watch of DeepSeekServings
   opened before the first create, when each one first carries condition ``BackendResolved``
   with ``observedGeneration == metadata.generation``. Latency = that moment minus the moment
   its create request was sent.
3. Reports per operator: latency p50/p95/max, time until all are resolved ("all s", from the
   first create request), startup time ("start s": process start until ours has indexed every
   Node, or until the no-op answers its liveness probe), operator peak RSS (``VmHWM``), its CPU
   seconds and those of kube-apiserver + etcd ("srv cpu"), and, over the measured phase (first
   create until all resolved plus ``--settle`` seconds), the API server's request counts by
   verb and resource (from kube-apiserver ``/metrics``, ``apiserver_request_total``; LISTs of
   nodes and deepseekservings must be zero: no per-reconcile LIST) and, for ours, the
   operator's own metrics (``deepseek_operator_reconciles_total``, ``deepseek_operator_api_requests_total``).
   Between the two operators every DeepSeekServing is deleted, so the second one resumes
   nothing.

Targets: ours p50 within 1.5x of the no-op p50; no LIST per reconcile; peak RSS under 200 MB.

Run: ``.venv/bin/python bench/bench_operator.py`` (``--help`` for the knobs; ``--json PATH``
also writes the figures as JSON). Needs the binaries of ``make cluster-bins``.
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
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from gpu_nodes import HEALTHY_GB200_AGENT_LABELS, agent_labels, make_gpu_node  # noqa: E402
from k8s.cluster import (  # noqa: E402
    CORE_BINARIES,
    ControlPlane,
    default_bin_dir,
    missing_binaries,
    wait_for,
)
from k8s.operator import OperatorProcess, install_crds  # noqa: E402

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
        self.connected = threading.Event()
        self.error: BaseException | None = None
        self.stopping = False
        listing = self.rest.call("GET", f"{DSS_PATH}?limit=1")
        self.resource_version = listing["metadata"]["resourceVersion"]
        self.conn = self.rest.connection(timeout=None)

    def run(self) -> None:
        """Stream events until stopped; record each object's first resolved moment."""
        try:
            resp = self.rest.send(
                self.conn,
                "GET",
                f"{DSS_PATH}?watch=true&resourceVersion={self.resource_version}"
                "&timeoutSeconds=1800",
            )
            if resp.status != 200:
                raise RuntimeError(f"watch: {resp.status} {resp.read()[:500]!r}")
            self.connected.set()
            for line in resp:
                now = time.monotonic()
                event = json.loads(line)
                obj = event.get("object") or {}
                meta = obj.get("metadata") or {}
                key = (meta.get("namespace"), meta.get("name"))
                if key[0] not in self.namespaces or key in self.resolved:
                    continue
                if event.get("type") != "DELETED" and resolved_generation(obj):
                    status = next(
                        c.get("status")
                        for c in obj["status"]["conditions"]
                        if c.get("type") == "BackendResolved"
                    )
                    self.resolved[key] = (now, str(status))
                    if len(self.resolved) >= self.expected:
                        self.done.set()
        except BaseException as exc:  # reported by the phase
            if not self.stopping:
                self.error = exc
        finally:
            self.done.set()

    def stop(self) -> None:
        """Close the stream."""
        self.stopping = True
        with contextlib.suppress(OSError):
            if self.conn.sock is not None:
                self.conn.sock.shutdown(socket.SHUT_RDWR)
        self.conn.close()


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
    """``kopf run --standalone -A --quiet bench/noop_operator.py`` with a liveness endpoint."""

    def start(self) -> NoopOperatorProcess:
        """Start kopf on the no-op handler file and wait for its liveness endpoint."""
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
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


@dataclass
class PhaseResult:
    """The figures of one operator's run."""

    name: str
    servings: int
    resolved: int = 0
    resolved_true: int = 0
    latencies_s: list[float] = field(default_factory=list)
    create_wall_s: float = 0.0
    startup_s: float = 0.0
    total_s: float = 0.0
    rss_peak_mb: float = 0.0
    rss_idle_mb: float = 0.0
    cpu_s: float = 0.0
    server_cpu_s: float = 0.0
    apiserver: dict[str, int] = field(default_factory=dict)
    operator_metrics: dict[str, float] = field(default_factory=dict)
    log_path: str = ""
    error: str = ""

    def summary(self) -> dict[str, Any]:
        """The JSON-able figures (latencies as p50/p95/max)."""
        lat = self.latencies_s or [float("nan")]
        return {
            "operator": self.name,
            "servings": self.servings,
            "resolved": self.resolved,
            "resolved_true": self.resolved_true,
            "p50_s": statistics.median(lat),
            "p95_s": percentile(lat, 0.95),
            "max_s": max(lat),
            "create_wall_s": self.create_wall_s,
            "startup_s": self.startup_s,
            "total_s": self.total_s,
            "rss_idle_mb": self.rss_idle_mb,
            "rss_peak_mb": self.rss_peak_mb,
            "cpu_s": self.cpu_s,
            "apiserver_etcd_cpu_s": self.server_cpu_s,
            "apiserver_requests": self.apiserver,
            "operator_metrics": self.operator_metrics,
            "log": self.log_path,
            "error": self.error,
        }


def run_phase(
    cp: ControlPlane,
    name: str,
    start: Callable[[], OperatorProcess],
    servings: list[dict],
    *,
    threads: int,
    timeout: float,
    settle: float,
    nodes: int,
    index_timeout: float,
) -> PhaseResult:
    """Start one operator, create *servings* concurrently, time their resolution, stop it.

    Afterwards every DeepSeekServing of the phase is deleted (so the next operator resumes
    nothing); the operator's children stay (no garbage collector runs) and are not watched by
    the next operator's handlers.
    """
    namespaces = sorted({s["metadata"]["namespace"] for s in servings})
    result = PhaseResult(name, len(servings))
    t_start = time.monotonic()
    op = start()
    assert op.proc is not None
    pid = op.proc.pid
    result.log_path = str(op.log_path)
    try:
        if name == "ours":  # wait until the node index holds every node
            try:
                wait_for(
                    lambda: f"deepseek_operator_nodes {float(nodes)}" in op.metrics(),
                    timeout=index_timeout,
                    what=f"operator node index at {nodes}",
                )
            except AssertionError as exc:
                gauge = [
                    line
                    for line in op.metrics().splitlines()
                    if line.startswith("deepseek_operator_nodes ")
                ]
                result.error = f"{exc}; {gauge[0] if gauge else 'no node gauge'}"
                result.rss_peak_mb = proc_rss_peak_mb(pid)
                print(f"[{name}] {result.error}", file=sys.stderr)
                return result
        result.startup_s = time.monotonic() - t_start
        time.sleep(2.0)  # let the initial listings settle
        result.rss_idle_mb = proc_rss_peak_mb(pid)
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

        def create(doc: dict) -> None:
            meta = doc["metadata"]
            path = f"/apis/{GROUP}/{VERSION}/namespaces/{meta['namespace']}/{PLURAL}"
            sent[(meta["namespace"], meta["name"])] = time.monotonic()
            rest.call("POST", path, doc)

        t0 = time.monotonic()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(create, servings))
        result.create_wall_s = time.monotonic() - t0
        finished = watcher.done.wait(timeout)
        t_done = max((t for t, _ in watcher.resolved.values()), default=time.monotonic())
        result.total_s = t_done - t0
        if watcher.error is not None:
            raise RuntimeError(f"watch failed: {watcher.error!r}")
        if not finished:
            print(
                f"[{name}] only {len(watcher.resolved)}/{len(servings)} resolved in {timeout}s",
                file=sys.stderr,
            )
        time.sleep(settle)  # trailing work (child events, kopf annotations) lands in the counts
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
        result.resolved = len(watcher.resolved)
        result.resolved_true = sum(1 for _, s in watcher.resolved.values() if s == "True")
        result.latencies_s = [t - sent[key] for key, (t, _) in watcher.resolved.items()]
    finally:
        op.stop()
    for ns in namespaces:
        cp.kubectl("delete", "dss", "--all", "-n", ns, "--wait=false", timeout=120)
    return result


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def _verb_count(requests: Mapping[str, int], verb: str, resource: str) -> int:
    return sum(v for k, v in requests.items() if k == f"{verb} {resource}")


def report(results: list[PhaseResult], args: argparse.Namespace, setup: Mapping[str, Any]) -> dict:
    """Print the results table and return everything as a JSON-able dict."""
    by = {r.name: r.summary() for r in results}
    print()
    print(
        f"operator benchmark: {args.nodes} nodes ({setup['gb200_nodes']} GB200 + "
        f"{args.nodes - setup['gb200_nodes']} H200, {len(setup['pools'])} pools), "
        f"{args.servings} DeepSeekServings over {args.namespaces} namespaces, created "
        f"concurrently from {args.threads} threads (one POST each); nodes created in "
        f"{setup['node_create_s']:.1f}s"
    )
    header = (
        f"{'operator':<8} {'resolved':>9} {'p50 s':>7} {'p95 s':>7} {'max s':>7} "
        f"{'all s':>7} {'start s':>7} {'create s':>8} {'cpu s':>7} {'srv cpu':>7} "
        f"{'RSS MB':>7} {'LIST n/dss':>10}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        s = by[r.name]
        if r.error:
            print(f"{r.name:<8} FAILED: {r.error}")
            continue
        lists = (
            f"{_verb_count(r.apiserver, 'LIST', 'nodes')}/"
            f"{_verb_count(r.apiserver, 'LIST', 'deepseekservings')}"
        )
        print(
            f"{r.name:<8} {s['resolved']:>4}/{s['servings']:<4} {s['p50_s']:>7.3f} "
            f"{s['p95_s']:>7.3f} {s['max_s']:>7.3f} {s['total_s']:>7.2f} {s['startup_s']:>7.1f} "
            f"{s['create_wall_s']:>8.2f} {s['cpu_s']:>7.1f} {s['apiserver_etcd_cpu_s']:>7.1f} "
            f"{s['rss_peak_mb']:>7.1f} {lists:>10}"
        )
    for r in results:
        print(f"\n[{r.name}] kube-apiserver requests during the measured phase (all clients):")
        for key, value in r.apiserver.items():
            print(f"  {key:<45} {value:>6}")
        if r.operator_metrics:
            print(f"[{r.name}] operator metrics (delta):")
            for key, value in sorted(r.operator_metrics.items()):
                print(f"  {key:<80} {value:>10.3f}")
    out: dict[str, Any] = {"setup": dict(setup), "args": vars(args), "results": by}
    if "ours" in by and not by["ours"]["error"]:
        ours = by["ours"]
        m = results[[r.name for r in results].index("ours")].operator_metrics
        reconciles = sum(v for k, v in m.items() if k.startswith("deepseek_operator_reconciles"))
        requests = sum(v for k, v in m.items() if k.startswith("deepseek_operator_api_requests"))
        dur_sum = m.get("deepseek_operator_reconcile_duration_seconds_sum", 0.0)
        dur_n = m.get("deepseek_operator_reconcile_duration_seconds_count", 0.0)
        ours_api = results[[r.name for r in results].index("ours")].apiserver
        derived = {
            "reconciles": reconciles,
            "reconciler_api_requests": requests,
            "api_requests_per_reconcile": requests / reconciles if reconciles else None,
            "mean_reconcile_ms": 1000 * dur_sum / dur_n if dur_n else None,
            "apiserver_list_nodes": _verb_count(ours_api, "LIST", "nodes"),
            "apiserver_list_dss": _verb_count(ours_api, "LIST", "deepseekservings"),
            "rss_ok": ours["rss_peak_mb"] < TARGET_RSS_MB,
        }
        if "noop" in by and not by["noop"]["error"]:
            ratio = ours["p50_s"] / by["noop"]["p50_s"]
            derived["p50_ratio_vs_noop"] = ratio
            derived["p95_ratio_vs_noop"] = ours["p95_s"] / by["noop"]["p95_s"]
            derived["total_ratio_vs_noop"] = ours["total_s"] / by["noop"]["total_s"]
            derived["ratio_ok"] = ratio <= TARGET_RATIO
        out["derived"] = derived
        print("\nderived:")
        for key, value in derived.items():
            print(
                f"  {key:<28} {value:.3f}" if isinstance(value, float) else f"  {key:<28} {value}"
            )
    return out


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line flags (defaults: the issue's 1,000 nodes and 200 DeepSeekServings)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1000, help="GPU nodes (default 1000)")
    p.add_argument("--servings", type=int, default=200, help="DeepSeekServings (default 200)")
    p.add_argument("--namespaces", type=int, default=4, help="namespaces per operator")
    p.add_argument("--gb200-share", type=float, default=0.6, help="share of GB200 nodes")
    p.add_argument("--gb200-pools", type=int, default=3, help="pools of GB200 nodes")
    p.add_argument("--h200-pools", type=int, default=2, help="pools of H200 nodes")
    p.add_argument("--threads", type=int, default=16, help="concurrent create requests")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds to wait per operator")
    p.add_argument(
        "--index-timeout",
        type=float,
        default=120.0,
        help="seconds ours may take to index every node before its phase counts as failed",
    )
    p.add_argument("--settle", type=float, default=3.0, help="seconds counted after the last")
    p.add_argument(
        "--operators",
        default="ours,noop",
        help="comma-separated phases to run, in order: ours, noop (default ours,noop)",
    )
    p.add_argument("--warmup", type=int, default=5, help="DSS created+deleted before measuring")
    p.add_argument("--work-dir", type=Path, default=None, help="keep cluster files here")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Start the control plane, create the nodes, run each operator phase, print the figures."""
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
        nodes = build_nodes(args.nodes, args.gb200_share, args.gb200_pools, args.h200_pools)
        node_s = create_nodes(cp, nodes, args.threads)
        ready = cp.kubectl_json("get", "node", nodes[0]["metadata"]["name"])
        assert ready["status"].get("conditions"), "node status was not stored"
        print(f"created {len(nodes)} nodes in {node_s:.1f}s", file=sys.stderr)
        phases = [p.strip() for p in args.operators.split(",") if p.strip()]
        all_ns = [f"bench-{p}-{i}" for p in phases for i in range(args.namespaces)]
        for ns in [*all_ns, "bench-warmup"]:
            cp.kubectl("create", "namespace", ns)
        if args.warmup:  # first writes of a new resource type pay one-off costs in the server
            warm = build_servings(args.warmup, ["bench-warmup"], pools)
            cp.apply(warm)
            cp.kubectl("delete", "dss", "--all", "-n", "bench-warmup")
        setup = {
            "gb200_nodes": round(args.nodes * args.gb200_share),
            "pools": pools,
            "node_create_s": node_s,
            "work_dir": str(work),
            "cpus": os.cpu_count(),
        }
        log_dir = work / "operator-logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        starters: dict[str, Callable[[], OperatorProcess]] = {
            "ours": lambda: OperatorProcess(cp, log_dir).start(),
            "noop": lambda: NoopOperatorProcess(cp, log_dir).start(),
        }
        results = []
        for phase in phases:
            namespaces = [f"bench-{phase}-{i}" for i in range(args.namespaces)]
            print(f"running {phase} ...", file=sys.stderr)
            results.append(
                run_phase(
                    cp,
                    phase,
                    starters[phase],
                    build_servings(args.servings, namespaces, pools),
                    threads=args.threads,
                    timeout=args.timeout,
                    settle=args.settle,
                    nodes=args.nodes,
                    index_timeout=args.index_timeout,
                )
            )
        out = report(results, args, setup)
        print(f"\nwall time {time.monotonic() - t_start:.0f}s; cluster files in {work}")
        if args.json:
            args.json.write_text(json.dumps(out, indent=2, default=str))
        return 0
    finally:
        with contextlib.suppress(Exception):
            cp.stop()


if __name__ == "__main__":
    raise SystemExit(main())
