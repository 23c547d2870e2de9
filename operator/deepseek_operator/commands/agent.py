"""``deepseek-operator agent``: the node agent (NVML → node labels) and its flags.

The agent itself lives in :mod:`deepseek_operator.agent`; it is imported only when the command
runs.
"""

from __future__ import annotations

import argparse

NAME = "agent"
HELP = "run the node agent (NVML → node labels)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``agent``."""
    parser.add_argument("--node-name", help="this Node's name (default: $NODE_NAME)")
    parser.add_argument("--interval", type=float, default=300.0, help="seconds between probes")
    parser.add_argument("--once", action="store_true", help="probe and publish once, then exit")
    parser.add_argument("--dry-run", action="store_true", help="print the labels, do not publish")
    parser.add_argument(
        "--kubeconfig", help="kubeconfig to use outside a Pod (default: in-cluster, $KUBECONFIG)"
    )
    parser.add_argument(
        "--recorded",
        metavar="FILE",
        help="replay a recorded topology (JSON recording or `nvidia-smi topo -m`) instead of NVML",
    )


def run(args: argparse.Namespace) -> int:
    """Run the node agent; return its exit status."""
    from deepseek_operator.agent.main import agent_command

    return agent_command(args)
