"""Command line: ``deepseek-operator run | agent | render | topology | crds``.

Each subcommand imports its implementation lazily, so ``render`` and ``crds`` never pay for
importing kopf or the Kubernetes client.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from deepseek_operator.names import DEFAULT_PEERING, PROJECT


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROJECT,
        description="Serve DeepSeek V4/V4.1 with vLLM on Kubernetes, choosing the MoE backend "
        "from the GPUs the cluster has.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    render = sub.add_parser("render", help="preview the decision, status and manifests offline")
    render.add_argument("-f", "--filename", required=True, help="DeepSeekServing YAML file")
    nodes = render.add_mutually_exclusive_group()
    nodes.add_argument(
        "--nodes", help="`kubectl get nodes -o yaml` output (a List) or Node documents"
    )
    nodes.add_argument(
        "--from-cluster", action="store_true", help="read the Nodes from the current kubeconfig"
    )
    render.add_argument("-o", "--output", choices=("text", "yaml", "json"), default="text")

    sub.add_parser("crds", help="print the generated DeepSeekServing CustomResourceDefinition")

    topo = sub.add_parser(
        "topology", help="labels the agent would publish, from `nvidia-smi topo -m`"
    )
    topo.add_argument("--topo-file", required=True, help="captured `nvidia-smi topo -m` output")
    topo.add_argument("-o", "--output", choices=("text", "json"), default="text")

    run = sub.add_parser("run", help="run the operator")
    run.add_argument("--namespace", action="append", default=[], help="watch only this namespace")
    run.add_argument("--standalone", action="store_true", help="no peering (single replica)")
    run.add_argument("--peering", default=DEFAULT_PEERING, help="ClusterKopfPeering name (HA)")
    run.add_argument(
        "--priority", type=int, default=None, help="peering priority (default: random)"
    )
    run.add_argument("--health-address", default="0.0.0.0", help="bind address of /healthz")
    run.add_argument("--health-port", type=int, default=8080, help="port of /healthz")
    run.add_argument("--metrics-address", default="0.0.0.0", help="bind address of /metrics")
    run.add_argument("--metrics-port", type=int, default=9090, help="port of Prometheus /metrics")
    run.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))

    agent = sub.add_parser("agent", help="run the node agent (NVML → node labels)")
    agent.add_argument("--node-name", help="this Node's name (default: $NODE_NAME)")
    agent.add_argument("--interval", type=float, default=300.0, help="seconds between probes")
    agent.add_argument("--once", action="store_true", help="probe and publish once, then exit")
    agent.add_argument("--dry-run", action="store_true", help="print the labels, do not publish")
    agent.add_argument(
        "--kubeconfig", help="kubeconfig to use outside a Pod (default: in-cluster, $KUBECONFIG)"
    )
    agent.add_argument(
        "--recorded",
        metavar="FILE",
        help="replay a recorded topology (JSON recording or `nvidia-smi topo -m`) instead of NVML",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen subcommand; return the process exit code."""
    args = _build_parser().parse_args(argv)
    if args.command == "render":
        from deepseek_operator.commands.render import render_command

        return render_command(args)
    if args.command == "crds":
        from deepseek_operator.api.crd import crds_command

        return crds_command(args)
    if args.command == "topology":
        from deepseek_operator.commands.topology import topology_command

        return topology_command(args)
    if args.command == "run":
        from deepseek_operator.controller.main import run_command

        return run_command(args)
    if args.command == "agent":
        from deepseek_operator.agent.main import agent_command

        return agent_command(args)
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
