"""Where the operator's memory goes at scale: tracemalloc snapshots around a burst.

A bench-only harness, never imported by the operator. It starts the local control plane,
creates ``--nodes`` GPU Nodes like ``bench.cluster`` does, starts ``deepseek-operator run
--standalone`` under ``tracemalloc`` (``--wrap``), and asks it for a snapshot (SIGUSR1) once
the Node index is built, and again once a burst of ``--servings`` DeepSeekServings has
resolved and the operator is quiet. It prints VmRSS / VmHWM at each point and the top
allocation sites of the growth between them, grouped by file and line.

tracemalloc adds its own bookkeeping (roughly a third more RSS), so read the sites as
shares, not absolute figures; the peak RSS that counts is ``make bench-operator``'s.

Run: ``.venv/bin/python -m bench.memory_profile --nodes 10000 --servings 1000``.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def wrapped_main(out_dir: Path, frames: int, argv: list[str]) -> int:
    """``deepseek-operator <argv>`` under tracemalloc; SIGUSR1 writes a snapshot to *out_dir*."""
    tracemalloc.start(frames)
    count = 0

    def dump(*_: Any) -> None:
        nonlocal count
        gc.collect()
        snap = tracemalloc.take_snapshot()
        path = out_dir / f"snap-{count}.trace"
        snap.dump(str(path))
        traced, peak = tracemalloc.get_traced_memory()
        (out_dir / f"snap-{count}.txt").write_text(
            f"VmRSS {_status_mb('VmRSS'):.1f} MB, VmHWM {_status_mb('VmHWM'):.1f} MB,"
            f" traced {traced / 2**20:.1f} MB (peak {peak / 2**20:.1f} MB)\n"
        )
        count += 1

    signal.signal(signal.SIGUSR1, dump)
    from deepseek_operator.cli import main

    return main(argv)


def _wait_file(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {path}")
        time.sleep(0.2)
    time.sleep(0.5)


def drive(args: argparse.Namespace) -> int:
    """Control plane, Nodes, the traced operator, a burst; print the growth by site."""
    from bench.cluster import (
        build_nodes,
        build_servings,
        create_nodes,
        pool_names,
        serving_path,
        wait_indexed,
    )
    from bench.measure import settle_quiet
    from bench.watch import ResolvedWatcher
    from tests.k8s.cluster import (
        CORE_BINARIES,
        ControlPlane,
        default_bin_dir,
        missing_binaries,
        wait_for,
    )
    from tests.k8s.operator import OperatorProcess, install_crds
    from tests.k8s.rest import Rest

    bin_dir = default_bin_dir()
    if missing_binaries(CORE_BINARIES, bin_dir):
        print("missing control-plane binaries: run `make cluster-bins`", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="dso-memory-"))
    cp = ControlPlane(bin_dir=bin_dir, work_dir=work)

    class TracedOperator(OperatorProcess):
        def start(self) -> TracedOperator:
            env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
            self.proc = subprocess.Popen(
                [
                    sys.executable, "-m", "bench.memory_profile", "--wrap", str(work), str(args.frames), "--",
                    "run", "--standalone",
                    "--health-address", "127.0.0.1", "--health-port", str(self.health_port),
                    "--metrics-address", "127.0.0.1", "--metrics-port", str(self.metrics_port),
                ],
                env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT,
            )  # fmt: skip
            wait_for(self._healthy, timeout=60, what="operator /healthz")
            return self

    try:
        cp.start()
        os.environ["KUBECONFIG"] = str(cp.kubeconfig)
        install_crds(cp)
        pools = pool_names(3, 2)
        create_nodes(cp, build_nodes(args.nodes, 0.6, 3, 2), 16)
        namespaces = [f"mem-{k}" for k in range(4)]
        for ns in namespaces:
            cp.kubectl("create", "namespace", ns)
        log_dir = work / "logs-traced"
        log_dir.mkdir()
        op = TracedOperator(cp, log_dir).start()
        assert op.proc is not None
        try:
            wait_indexed(op, args.nodes, 600)
            time.sleep(3.0)
            op.proc.send_signal(signal.SIGUSR1)
            _wait_file(work / "snap-0.txt", 120)
            docs = build_servings(args.servings, namespaces, pools)
            watcher = ResolvedWatcher(cp, namespaces, len(docs))
            watcher.start()
            watcher.connected.wait(10)
            rest = Rest(cp)

            def create(doc: dict) -> None:
                rest.call("POST", serving_path(doc["metadata"]["namespace"]), doc)

            with ThreadPoolExecutor(16) as pool:
                list(pool.map(create, docs))
            watcher.done.wait(600)
            time.sleep(3.0)
            settle_quiet(op.proc.pid, 300)
            watcher.stop()
            op.proc.send_signal(signal.SIGUSR1)
            _wait_file(work / "snap-1.txt", 300)
        finally:
            op.stop()
        print("after index:", (work / "snap-0.txt").read_text().strip())
        print(f"after {args.servings} resolved:", (work / "snap-1.txt").read_text().strip())
        before = tracemalloc.Snapshot.load(str(work / "snap-0.trace"))
        after = tracemalloc.Snapshot.load(str(work / "snap-1.trace"))
        stats = after.compare_to(before, args.group_by)
        total = sum(s.size_diff for s in stats)
        print(f"growth {total / 2**20:.1f} MB traced; top sites:")
        for s in stats[: args.top]:
            print(f"{s.size_diff / 2**10:>10.0f} KiB {s.count_diff:>8} blocks  {s.traceback}")
            if args.group_by == "traceback":
                print(
                    "\n".join(f"      {line}" for line in s.traceback.format()[-2 * args.frames :])
                )
        print(f"snapshots in {work}")
        return 0
    finally:
        cp.stop()


def main(argv: list[str] | None = None) -> int:
    """``--wrap DIR FRAMES -- <operator args>`` inside the operator; otherwise the driver."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--wrap"]:
        sep = argv.index("--")
        return wrapped_main(Path(argv[1]), int(argv[2]), argv[sep + 1 :])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=10000)
    p.add_argument("--servings", type=int, default=1000)
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--frames", type=int, default=1, help="frames per traceback (more: slower)")
    p.add_argument("--group-by", default="lineno", choices=["lineno", "filename", "traceback"])
    return drive(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
