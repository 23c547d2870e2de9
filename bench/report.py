"""The benchmark's report: medians and ours/no-op ratios, the printed tables and the plot."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.measure import PhaseResult, StartupResult


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
