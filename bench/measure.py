"""The benchmark's measurements: start-up, latency runs and restart, with their probes.

Probes: kube-apiserver's request counters (``/metrics``), our operator's own counters, a
process's CPU seconds and peak RSS (``/proc``), the load average. Runs: :func:`measure_startup`
(process start until every Node is indexed), :func:`run_phase` (``idle`` or ``burst``
DeepSeekServings until each is resolved) and :func:`measure_restart`; each returns the figures
of one operator, which :mod:`bench.report` compares.
"""

from __future__ import annotations

import copy
import os
import ssl
import statistics
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.cluster import delete_served, serving_path, start_operator, wait_indexed
from bench.watch import ResolvedWatcher, resolved_generation
from tests.k8s.cluster import ControlPlane, wait_for
from tests.k8s.rest import Rest


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
    rest.call("POST", serving_path(namespace), warm)
    wait_for(
        lambda: resolved_generation(rest.call("GET", serving_path(namespace, "warm-up"))),
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
            path = serving_path(meta["namespace"])
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
        delete_served(cp, [*namespaces, warm_ns])
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
                    lambda doc: rest.call("POST", serving_path(doc["metadata"]["namespace"]), doc),
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
        rest.call("POST", serving_path(namespaces[0]), probe)
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
        delete_served(cp, namespaces)
    return out
