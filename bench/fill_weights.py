"""Time ``fill-weights`` on a generated checkpoint from the hub stand-in: the fill and its rerun.

``python -m bench.fill_weights [--gib 1] [--shards 8]`` generates the checkpoint in a temporary
folder, serves it from :class:`tests.hub_standin.HubStandin` on 127.0.0.1, runs the installed
command twice against one cache and prints, per run, the wall time, the command's own
``seconds`` (from its ``done`` line) and the bytes it fetched. docs/weights.md quotes a run.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from tests.hub_standin import HubStandin, make_checkpoint

REPO = "deepseek-ai/bench"


def main() -> None:
    """Generate, serve, fill twice, print one line per run."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--shards", type=int, default=8)
    args = parser.parse_args()
    cli = pathlib.Path(sys.executable).with_name("deepseek-operator")
    with tempfile.TemporaryDirectory(prefix="fill-bench-") as tmp:
        root = pathlib.Path(tmp)
        shard = int(args.gib * 1024**3) // args.shards
        files = make_checkpoint(root / "checkpoint", args.shards, shard)
        hub = HubStandin().start()
        hub.add_commit(REPO, "b" * 40, files)
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env.update(HF_ENDPOINT=hub.endpoint, HF_HOME=str(root / "hf"))
        try:
            for run in ("fill", "rerun"):
                started = time.monotonic()
                proc = subprocess.run(
                    [str(cli), "fill-weights", "--model", REPO, "--revision", "main"],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                wall = time.monotonic() - started
                last = json.loads(proc.stdout.splitlines()[-1])
                print(
                    f"{run}: exit {proc.returncode}, wall {wall:.2f} s, command {last.get('seconds')} s, "
                    f"fetched {last.get('bytesFetched')} of {sum(f.size for f in files)} bytes"
                )
        finally:
            hub.stop()


if __name__ == "__main__":
    main()
