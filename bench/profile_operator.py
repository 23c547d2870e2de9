"""Where one DeepSeekServing's apply → ``BackendResolved`` goes, in the real operator (issue 13).

A bench-only harness, never imported by the operator. It starts the local control plane
(etcd + kube-apiserver), creates ``--nodes`` GPU Nodes like ``bench.cluster`` does, then runs
``--servings`` DeepSeekServings one at a time (idle mode) against

* ours, wrapped (``--wrap``): the same ``deepseek-operator run --standalone``, with timing spans
  around the steps of a reconcile (kopf's event processing, parse, plan, status write, child
  applies; ``time.monotonic`` is one clock for every process of the machine, so the spans line
  up with the create request and the watch that sees the condition); optionally sampled by
  py-spy (``--py-spy PATH``: ``record --pid``, all threads, CPU only);
* the no-op baseline (``bench/noop_operator.py``), for its latency and CPU per object.

It prints, per operator: latency p50/p95, CPU ms per object, and for ours the median of each
span, and writes the raw spans (and py-spy's collapsed stacks) to ``--out``.

Run: ``.venv/bin/python -m bench.profile_operator --nodes 1000 --servings 40``.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------------------------
# Wrapper mode: runs inside the operator process
# --------------------------------------------------------------------------------------------

SPANS: list[tuple[str, str, float, float, float]] = []  # (object, step, start, end, thread CPU)
_SPANS_LOCK = threading.Lock()


def _record(key: str | tuple[str, str], step: str, start: float, cpu0: float) -> None:
    end = time.monotonic()
    if isinstance(key, tuple):  # the key function names the step too
        key, step = key
    with _SPANS_LOCK:
        SPANS.append((key, step, start, end, time.thread_time() - cpu0))


def _span_async(step: str, key_of: Any, fn: Any) -> Any:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        start, cpu0 = time.monotonic(), time.thread_time()
        try:
            return await fn(*args, **kwargs)
        finally:
            _record(key_of(*args, **kwargs), step, start, cpu0)

    return wrapper


def _span_sync(step: str, key_of: Any, fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start, cpu0 = time.monotonic(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _record(key_of(*args, **kwargs), step, start, cpu0)

    return wrapper


def _meta_key(body: Any) -> str:
    meta = (body or {}).get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def instrument(spans_path: Path) -> None:
    """Wrap the steps of a reconcile with timing spans; dump them to *spans_path* at exit."""
    from kopf._core.reactor import processing

    from deepseek_operator.controller import discovery, reconcile, records, state
    from deepseek_operator.kube import client as kube

    def event_key(*_: Any, raw_event: Any = None, **__: Any) -> tuple[str, str]:
        obj = (raw_event or {}).get("object") or {}
        if obj.get("kind") == "DeepSeekServing":
            return _meta_key(obj), "kopf_event(DeepSeekServing)"
        meta = obj.get("metadata") or {}
        owner = (meta.get("labels") or {}).get("app.kubernetes.io/instance")
        return f"{meta.get('namespace')}/{owner}", f"kopf_event({obj.get('kind')})"

    processing.process_resource_event = _span_async(
        "kopf_process_event", event_key, processing.process_resource_event
    )
    state.OperatorState.reconcile = _span_async(  # type: ignore[method-assign]
        "operator_reconcile",
        lambda _self, key, *a, **k: f"{key[0]}/{key[1]}",
        state.OperatorState.reconcile,
    )
    records.Records.parse = _span_sync(  # type: ignore[method-assign]
        "parse", lambda _self, body: _meta_key(body), records.Records.parse
    )
    reconcile.plan = _span_sync(
        "plan", lambda obj, *a, **k: f"{obj.namespace}/{obj.name}", reconcile.plan
    )
    kube.KubeClient._patch_status = _span_sync(  # type: ignore[method-assign]
        "patch_status(thread)",
        lambda _self, ns, name, *a, **k: f"{ns}/{name}",
        kube.KubeClient._patch_status,
    )
    reconcile.Reconciler._write_status = _span_async(  # type: ignore[method-assign]
        "write_status(loop)",
        lambda _self, _rec, key, *a, **k: f"{key[0]}/{key[1]}",
        reconcile.Reconciler._write_status,
    )

    def apply_key(_self: Any, manifest: Any, *_: Any) -> str:
        meta = manifest.decoded().get("metadata") or {}
        owner = (meta.get("labels") or {}).get("app.kubernetes.io/instance")
        return f"{meta.get('namespace')}/{owner}"

    kube.KubeClient._apply = _span_sync(  # type: ignore[method-assign]
        "apply(thread)", apply_key, kube.KubeClient._apply
    )
    discovery.ClusterApiProbe.current = _span_sync(  # type: ignore[method-assign]
        "apis(thread)", lambda *_: "-", discovery.ClusterApiProbe.current
    )

    def dump() -> None:
        spans_path.write_text(json.dumps(SPANS))

    atexit.register(dump)


def wrapped_main(spans_path: Path, argv: list[str]) -> int:
    """``deepseek-operator <argv>`` with the spans installed."""
    instrument(spans_path)
    from deepseek_operator.cli import main

    return main(argv)


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


def summarise_spans(
    spans: list[list[Any]], created: dict[str, float], seen: dict[str, float]
) -> list[tuple[str, float, float, float, float, float]]:
    """Per step: (step, calls per object, median start of its first call after the create (ms),
    median wall ms of that first call, median CPU ms per call, median CPU ms per object)."""
    calls: dict[tuple[str, str], list[tuple[float, float, float]]] = defaultdict(list)
    for key, step, start, end, cpu in spans:
        if key in created and start >= created[key]:
            calls[(step, key)].append((start - created[key], end - start, cpu))
    steps = sorted({step for step, _ in calls})
    rows = []
    for step in steps:
        per_object = [sorted(v) for (s, _), v in calls.items() if s == step]
        rows.append(
            (
                step,
                statistics.mean(len(v) for v in per_object),
                statistics.median(v[0][0] for v in per_object) * 1000,
                statistics.median(v[0][1] for v in per_object) * 1000,
                statistics.median(c[2] for v in per_object for c in v) * 1000,
                statistics.median(sum(c[2] for c in v) for v in per_object) * 1000,
            )
        )
    rows.append(
        (
            "watch sees BackendResolved",
            1.0,
            statistics.median(seen[k] - created[k] for k in seen if k in created) * 1000,
            0.0,
            0.0,
            0.0,
        )
    )
    return sorted(rows, key=lambda r: r[2])


def collapsed_summary(path: Path, top: int) -> list[str]:
    """py-spy's collapsed stacks → the functions with the most inclusive and self samples."""
    inclusive: dict[str, int] = defaultdict(int)
    own: dict[str, int] = defaultdict(int)
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        total += count
        frames = stack.split(";")
        for frame in set(frames):
            inclusive[frame] += count
        own[frames[-1]] += count
    out = [f"{total} samples"]
    out.append("inclusive:")
    for frame, n in sorted(inclusive.items(), key=lambda kv: -kv[1])[:top]:
        out.append(f"  {100 * n / max(total, 1):5.1f}%  {frame}")
    out.append("self:")
    for frame, n in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
        out.append(f"  {100 * n / max(total, 1):5.1f}%  {frame}")
    return out


def wrapped_operator_class() -> type:
    """:class:`OperatorProcess` running ``deepseek-operator run --standalone`` through ``--wrap``."""
    from tests.k8s.cluster import wait_for
    from tests.k8s.operator import OperatorProcess

    class WrappedOperatorProcess(OperatorProcess):
        def __init__(self, cp: Any, log_dir: Path, spans_path: Path) -> None:
            super().__init__(cp, log_dir)
            self.spans_path = spans_path

        def start(self) -> WrappedOperatorProcess:
            env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
            self.proc = subprocess.Popen(
                [
                    sys.executable, "-m", "bench.profile_operator", "--wrap", str(self.spans_path), "--",
                    "run", "--standalone",
                    "--health-address", "127.0.0.1", "--health-port", str(self.health_port),
                    "--metrics-address", "127.0.0.1", "--metrics-port", str(self.metrics_port),
                ],
                env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT,
            )  # fmt: skip
            wait_for(self._healthy, timeout=60, what="operator /healthz")
            return self

    return WrappedOperatorProcess


def drive(args: argparse.Namespace) -> int:
    """Control plane, Nodes, then each operator's idle run; print and write the figures."""
    from bench.cluster import (
        NoopOperatorProcess,
        build_nodes,
        build_servings,
        create_nodes,
        pool_names,
        serving_path,
        wait_indexed,
    )
    from bench.measure import percentile, proc_cpu_seconds, warm_up
    from bench.watch import ResolvedWatcher
    from tests.k8s.cluster import CORE_BINARIES, ControlPlane, default_bin_dir, missing_binaries
    from tests.k8s.operator import OperatorProcess, install_crds
    from tests.k8s.rest import Rest

    WrappedOperatorProcess = wrapped_operator_class()
    bin_dir = default_bin_dir()
    if missing_binaries(CORE_BINARIES, bin_dir):
        print("missing control-plane binaries: run `make cluster-bins`", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="dso-profile-"))
    out = args.out or work
    out.mkdir(parents=True, exist_ok=True)
    cp = ControlPlane(bin_dir=bin_dir, work_dir=work)
    report: dict[str, Any] = {"nodes": args.nodes, "servings": args.servings, "runs": []}
    try:
        cp.start()
        os.environ["KUBECONFIG"] = str(cp.kubeconfig)
        install_crds(cp)
        pools = pool_names(3, 2)
        create_nodes(cp, build_nodes(args.nodes, 0.6, 3, 2), 16)
        log_dir = work / "logs-operators"
        log_dir.mkdir(exist_ok=True)
        for run_index, name in enumerate(args.operators):
            spans_path = out / f"spans-{name}-{run_index}.json"

            if name == "ours":
                op: OperatorProcess = WrappedOperatorProcess(cp, log_dir, spans_path).start()
            else:
                op = NoopOperatorProcess(cp, log_dir).start()
            assert op.proc is not None
            pid = op.proc.pid
            namespaces = [f"prof-{name}-{run_index}-{k}" for k in range(2)]
            for ns in [*namespaces, f"prof-{name}-{run_index}-warm"]:
                cp.kubectl("create", "namespace", ns)
            try:
                wait_indexed(op, args.nodes, 300)
                time.sleep(2.0)
                docs = build_servings(args.servings, namespaces, pools)
                warm_up(cp, docs[0], f"prof-{name}-{run_index}-warm")
                watcher = ResolvedWatcher(cp, namespaces, len(docs))
                watcher.start()
                watcher.connected.wait(10)
                time.sleep(1.0)
                spy = None
                if args.py_spy and name == "ours":
                    spy = subprocess.Popen(
                        [
                            args.py_spy, "record", "--pid", str(pid), "-r", "250", "-f", "raw",
                            "--nonblocking", "-o", str(out / f"py-spy-{name}-{run_index}.txt"),
                        ],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    )  # fmt: skip
                    time.sleep(1.5)
                rest = Rest(cp)
                created: dict[str, float] = {}
                load_before = os.getloadavg()[0]
                cpu0 = proc_cpu_seconds(pid)
                for doc in docs:
                    meta = doc["metadata"]
                    path = serving_path(meta["namespace"])
                    created[f"{meta['namespace']}/{meta['name']}"] = time.monotonic()
                    rest.call("POST", path, doc)
                    if not watcher.wait_for((meta["namespace"], meta["name"]), 60):
                        break
                    time.sleep(args.gap)
                time.sleep(1.0)
                cpu = proc_cpu_seconds(pid) - cpu0
                load_after = os.getloadavg()[0]
                if spy is not None:
                    spy.send_signal(signal.SIGINT)
                    spy.wait(30)
                watcher.stop()
                seen = {f"{k[0]}/{k[1]}": t for k, (t, _) in watcher.resolved.items()}
                lat = sorted(seen[k] - created[k] for k in seen)
            finally:
                op.stop()
            run = {
                "operator": name,
                "resolved": len(seen),
                "p50_ms": statistics.median(lat) * 1000,
                "p95_ms": percentile(lat, 0.95) * 1000,
                "cpu_ms_per_object": cpu * 1000 / max(len(seen), 1),
                "load": [load_before, load_after],
            }
            print(
                f"\n== {name}: {run['resolved']}/{len(docs)} resolved, p50 {run['p50_ms']:.1f} ms"
                f" p95 {run['p95_ms']:.1f} ms, CPU {run['cpu_ms_per_object']:.1f} ms/object"
                f" (incl. {args.gap * 1000:.0f} ms idle gap each), load {load_before:.1f}"
                f"-{load_after:.1f}"
            )
            if name == "ours" and spans_path.exists():
                rows = summarise_spans(json.loads(spans_path.read_text()), created, seen)
                run["spans"] = rows
                print(
                    f"{'step':<28} {'calls':>5} {'1st at ms':>9} {'1st wall ms':>11}"
                    f" {'CPU ms/call':>11} {'CPU ms/object':>13}"
                )
                for step, n, offset, wall, cpu_call, cpu_obj in rows:
                    print(
                        f"{step:<28} {n:>5.1f} {offset:>9.1f} {wall:>11.1f} {cpu_call:>11.1f}"
                        f" {cpu_obj:>13.1f}"
                    )
            spy_out = out / f"py-spy-{name}-{run_index}.txt"
            if spy_out.exists():
                lines = collapsed_summary(spy_out, args.top)
                run["py_spy"] = lines
                print("\n".join(lines))
            report["runs"].append(run)
            for ns in [*namespaces, f"prof-{name}-{run_index}-warm"]:
                cp.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        (out / "profile.json").write_text(json.dumps(report, indent=2))
        print(f"\nwrote {out / 'profile.json'}")
        return 0
    finally:
        cp.stop()


def main(argv: list[str] | None = None) -> int:
    """``--wrap SPANS -- <operator args>`` inside the operator; otherwise the driver."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--wrap"]:
        sep = argv.index("--")
        return wrapped_main(Path(argv[1]), argv[sep + 1 :])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--servings", type=int, default=40)
    p.add_argument("--operators", nargs="+", default=["ours", "noop"])
    p.add_argument("--gap", type=float, default=0.2, help="seconds between objects")
    p.add_argument("--py-spy", default="", help="path of a py-spy binary (optional)")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--out", type=Path, default=None)
    return drive(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
