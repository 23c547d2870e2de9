"""Benchmark of the pure core and the offline ``render`` command.

Targets (issue 2): ``resolve`` over an inventory of 5,000 nodes under 20 ms; ``deepseek-operator
render`` of the example under 0.5 s wall. Run: ``make bench`` (or ``python -m bench.bench_core``).
"""

from __future__ import annotations

import pathlib
import statistics
import subprocess
import sys
import time

from deepseek_operator.engine.decision import resolve
from deepseek_operator.nodes.facts import build_inventory
from tests.unit.factories import agent_labels, node, spec

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _pool(n: int) -> list[dict[str, object]]:
    products = ["NVIDIA-GB200", "NVIDIA-H200", "NVIDIA-B200", "NVIDIA-GB200"]
    out = []
    for i in range(n):
        product = products[i % len(products)]
        agent = agent_labels(product, "false" if i % 17 == 0 else "true") if i % 3 else None
        out.append(
            node(
                f"node-{i:05d}",
                product,
                agent=agent,
                taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
            )
        )
    return out


def bench_resolve(n: int = 5000, rounds: int = 50) -> tuple[float, float, float]:
    """(median ms, p95 ms, inventory build ms) of resolve over ``n`` nodes."""
    raw = _pool(n)
    t0 = time.perf_counter()
    inv = build_inventory(raw)
    build_ms = (time.perf_counter() - t0) * 1000
    s = spec(
        replicas=8,
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        resolve(s, inv)
        samples.append((time.perf_counter() - t) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.95) - 1], build_ms


def bench_render_cli(rounds: int = 10) -> tuple[float, float]:
    """(median s, max s) wall time of ``deepseek-operator render`` of the seed example."""
    cmd = [
        sys.executable,
        "-m",
        "deepseek_operator.cli",
        "render",
        "-f",
        str(ROOT / "examples/dsv41-flash-gb200.yaml"),
        "--nodes",
        str(ROOT / "examples/nodes-mixed.yaml"),
        "-o",
        "json",
    ]
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        samples.append(time.perf_counter() - t)
    return statistics.median(samples), max(samples)


def main() -> int:
    """Print the figures; exit 1 if a target is missed."""
    med, p95, build = bench_resolve()
    print(
        f"resolve over 5,000 nodes: median {med:.1f} ms, p95 {p95:.1f} ms (target < 20 ms); inventory build {build:.0f} ms (once per Node change set, not per resolve)"
    )
    rmed, rmax = bench_render_cli()
    print(
        f"deepseek-operator render (example, mixed pool, -o json): median {rmed * 1000:.0f} ms, max {rmax * 1000:.0f} ms wall (target < 500 ms)"
    )
    return 0 if med < 20 and rmed < 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
