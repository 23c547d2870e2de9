"""``deepseek-operator topology --topo-file F [-o text|json]``: labels from a ``topo -m`` capture.

Prints the labels the node agent would publish for the GPUs a captured ``nvidia-smi topo -m``
describes (docs/design.md), so a user can check a node by hand and tests can run on real
captures. A capture knows no link counts, NVSwitch attachment, MIG mode or fabric info, so those
labels are absent here even though the agent publishes them. Bad input: one line on stderr and
exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from deepseek_operator.agent.gpu_topology import GpuTopology
from deepseek_operator.agent.labels import annotation_document, labels_for
from deepseek_operator.agent.topo_smi import TopoMatrix, parse_topo_matrix, topology_from_matrix


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def _notes(topology: GpuTopology) -> list[str]:
    notes = list(topology.notes)
    if not topology.matrix_complete:
        notes.append(
            "nvlink.fully-connected is 'unknown' and nvlink.domain-size is a lower bound, "
            "because the capture does not show every GPU pair"
        )
    return notes


def labels_document(matrix: TopoMatrix, topology: GpuTopology) -> dict[str, Any]:
    """The ``-o json`` document: ``{"labels", "annotation", "matrix", "notes"}``."""
    return {
        "labels": labels_for(topology),
        "annotation": annotation_document(topology),
        "matrix": {
            "gpus": [f"GPU{i}" for i in range(matrix.gpu_count)],
            "codes": [list(row) for row in matrix.codes],
            "nvlink": [list(row) for row in matrix.nvlink()],
            "nvlinkDomain": [f"GPU{i}" for i in topology.nvlink_domain()],
        },
        "notes": _notes(topology),
    }


def write_label_table(topology: GpuTopology, out: TextIO) -> None:
    """Aligned ``key  value`` lines, then the notes as ``# ...`` comments."""
    labels = labels_for(topology)
    width = max(len(k) for k in labels)
    for key, value in labels.items():
        out.write(f"{key:<{width}}  {value}\n")
    domain = ", ".join(f"GPU{i}" for i in topology.nvlink_domain())
    out.write(f"# largest NVLink domain: {domain}\n")
    for note in _notes(topology):
        out.write(f"# {note}\n")


NAME = "topology"
HELP = "labels the agent would publish, from `nvidia-smi topo -m`"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``topology``."""
    parser.add_argument("--topo-file", required=True, help="captured `nvidia-smi topo -m` output")
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text")


def run(args: argparse.Namespace) -> int:
    """Run the ``topology`` subcommand; return the exit code (1 on an unreadable capture)."""
    try:
        text = _read(args.topo_file)
        matrix = parse_topo_matrix(text)
        topology = topology_from_matrix(matrix)
    except OSError as exc:
        print(f"error: cannot read {args.topo_file}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"error: {args.topo_file}: {exc}", file=sys.stderr)
        return 1
    if args.output == "json":
        json.dump(labels_document(matrix, topology), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        write_label_table(topology, sys.stdout)
    return 0
