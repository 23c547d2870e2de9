"""Opt-in GPU check: run the real NVML probe and print what the agent would publish.

Needs a node with an NVIDIA driver; nothing here runs in CI. The file name does not match
pytest's ``test_*.py`` pattern, so a plain ``pytest`` never collects it; run it explicitly:

    python tests/gpu/check_nvml_probe.py [--record OUT.json]   # prints labels + annotation
    pytest -m gpu tests/gpu/check_nvml_probe.py                # the same, as an assertion

It checks the invariants the operator relies on (a GPU was found, the matrix is complete and
symmetric, every label is valid) and, when ``nvidia-smi`` is on PATH, that the NVLink answer
from NVML's P2P status agrees with ``nvidia-smi topo -m`` (docs/node-facts.md, point 6).
``--record`` writes a JSON recording that ``deepseek-operator agent --recorded`` and
``RecordedProbe`` replay on CPU-only machines.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys

import pytest

from deepseek_operator.agent.gpu_topology import GpuTopology
from deepseek_operator.agent.labels import (
    annotation_document,
    is_valid_label_value,
    labels_for,
)
from deepseek_operator.agent.nvml import NvmlProbe
from deepseek_operator.agent.probe import topology_to_json
from deepseek_operator.agent.topo_smi import parse_topo


def check(topology: GpuTopology) -> list[str]:
    """Problems with a probed topology (empty when it is what the operator expects)."""
    problems: list[str] = []
    if topology.count == 0:
        return [f"NVML found no GPU: {topology.unavailable_reason}"]
    if not topology.matrix_complete:
        problems.append("the NVML NVLink matrix has unknown cells")
    labels = labels_for(topology)
    problems += [
        f"invalid label value {k}={v!r}" for k, v in labels.items() if not is_valid_label_value(v)
    ]
    if shutil.which("nvidia-smi"):
        text = subprocess.run(
            ["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
        try:
            from_smi = parse_topo(text)
        except ValueError as exc:
            problems.append(f"cannot parse this node's `nvidia-smi topo -m`: {exc}")
        else:
            if from_smi.count != topology.count:
                problems.append(f"topo -m shows {from_smi.count} GPUs, NVML {topology.count}")
            elif from_smi.nvlink != topology.nvlink:
                problems.append(
                    "NVML P2P-NVLink matrix differs from `nvidia-smi topo -m` NV# cells: "
                    f"{topology.nvlink} vs {from_smi.nvlink}"
                )
    return problems


def report(topology: GpuTopology) -> str:
    """Labels (aligned), the annotation, and any problems, as text."""
    labels = labels_for(topology)
    width = max(len(k) for k in labels)
    lines = [f"{k:<{width}}  {v}" for k, v in labels.items()]
    if topology.count:
        lines.append(json.dumps(annotation_document(topology), indent=2))
    return "\n".join(lines)


@pytest.mark.gpu
def test_nvml_probe_on_this_node() -> None:
    """The real probe finds GPUs and its answer agrees with nvidia-smi."""
    topology = NvmlProbe().probe()
    print(report(topology))
    assert check(topology) == []


def main(argv: list[str] | None = None) -> int:
    """Print the report; exit 1 when a check fails."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", help="also write a JSON recording of the topology here")
    args = parser.parse_args(argv)
    topology = NvmlProbe().probe()
    print(report(topology))
    if args.record:
        with open(args.record, "w", encoding="utf-8") as fh:
            json.dump(topology_to_json(topology), fh, indent=2)
    problems = check(topology)
    for problem in problems:
        print(f"PROBLEM: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
