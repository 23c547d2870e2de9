"""Conformance with the newest supported vLLM release, run by `make test` (all releases:
`make conformance`): the harness renders ~1,200 DeepSeekServings with our renderer and asks the
release's own parser and guards (conformance/oracle.py, in the release's cached virtualenv) about
each on five GPU generations, and 724 capacity layouts (288 V4-Flash, 132 V4-Pro with its own
compress ratios, 304 V4.1-Flash, asked per GPU) to the release's own KV planner and the MegaMoE routed experts to its own expert class on
the meta device (conformance/capacity_check.py); any disagreement fails with the spec that shows
it.

Without the release's virtualenv (hack/install-vllm.sh --newest, which `make test` runs) the test
skips with that command, except under CI or DSO_REQUIRE_CLUSTER=1 (`make test`) where it fails.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from conformance.launcher import oracle_python
from deepseek_operator.catalog.vllm import newest_release

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_newest_release_conforms() -> None:
    release = newest_release()
    if not oracle_python(release).exists():
        message = f"vLLM {release} is not installed: run hack/install-vllm.sh --newest"
        required = os.environ.get("CI", "").lower() in ("1", "true", "yes")
        if required or os.environ.get("DSO_REQUIRE_CLUSTER", "") not in ("", "0"):
            pytest.fail(message)
        pytest.skip(message)
    out = subprocess.run(
        [sys.executable, "-m", "conformance.harness", "--newest"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=2400,  # the V4.1 capacity matrix doubles (f), under load up to ~7 min
        check=False,
    )
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    table = out.stdout.splitlines()[0]
    assert table.startswith(f"vLLM {release}") and "mismatches    0" in table
    specs = int(table.split("specs")[1].split()[0])
    checks = int(table.split("guard/SP checks")[1].split()[0])
    launches = int(table.split("launch")[1].split()[0])  # multi-node leader and worker argv
    assert specs >= 1000 and checks >= 5 * 1000 and launches >= 1000, table
    # (f): the capacity matrix (V4 / V4.1 KV groups, blocks and concurrency) against vLLM's planner.
    row = next(line for line in out.stdout.splitlines() if " capacity layouts " in line)
    assert "mismatches    0" in row, out.stdout[-6000:]
    layouts = int(row.split("capacity layouts")[1].split()[0])
    pools = int(row.split("pools")[1].split()[0])
    assert layouts >= 200 and pools >= 4 * layouts, row
    v41 = int(row.split("of which V4.1-Flash")[1].split()[0])
    pro = int(row.split("of which V4-Pro")[1].split()[0])
    weights = int(row.split("MegaMoE routed-expert weights")[1].split()[0])
    assert v41 >= 200 and pro >= 100 and weights >= 18, row


def test_newest_release_conforms_for_prefill_decode_pairs() -> None:
    """The P/D matrix (conformance/pd_harness.py): every pod of both roles through the release's
    parser and KVTransferConfig, and its NIXL compatibility hash equal on every pod."""
    release = newest_release()
    if not oracle_python(release).exists():
        message = f"vLLM {release} is not installed: run hack/install-vllm.sh --newest"
        required = os.environ.get("CI", "").lower() in ("1", "true", "yes")
        if required or os.environ.get("DSO_REQUIRE_CLUSTER", "") not in ("", "0"):
            pytest.fail(message)
        pytest.skip(message)
    out = subprocess.run(
        [sys.executable, "-m", "conformance.pd_harness", "--release", release],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1800,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    row = out.stdout.splitlines()[1].split()
    assert row[0] == release, out.stdout
    specs, pods, disagreements = int(row[1]), int(row[2]), int(row[3])
    refused, examples, kv_refusals, mismatches = row[4], int(row[5]), int(row[7]), int(row[8])
    assert specs >= 500 and pods >= 2 * specs and disagreements == 0 and mismatches == 0, row
    assert refused.split("/")[0] == refused.split("/")[1], row  # every hash change refused
    # the P/D examples, and sleep mode and the specialized decode per role asked of the release
    assert examples >= 2 and kv_refusals >= 11, row
