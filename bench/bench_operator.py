"""Benchmark of the operator at fleet scale (issue 13), against a no-op kopf baseline.

Everything runs on one local control plane (etcd + kube-apiserver from :mod:`tests.k8s.cluster`;
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
This module is the command line; the work is in :mod:`bench.cluster`, :mod:`bench.watch`,
:mod:`bench.measure` and :mod:`bench.report`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.cluster import ROOT, build_nodes, build_servings, create_nodes, pool_names
from bench.measure import PhaseResult, StartupResult, measure_restart, measure_startup, run_phase
from bench.report import plot, print_report, summarise
from tests.k8s.cluster import CORE_BINARIES, ControlPlane, default_bin_dir, missing_binaries
from tests.k8s.operator import install_crds


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
