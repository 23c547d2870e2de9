"""``deepseek-operator run``: the operator (kopf, the handlers, metrics and health endpoints).

kopf and the Kubernetes client are imported only when the command runs, so the other commands
never pay for them.
"""

from __future__ import annotations

import argparse

from deepseek_operator.names import DEFAULT_FILL_IMAGE, DEFAULT_PEERING, DEFAULT_ROUTER_IMAGE

NAME = "run"
HELP = "run the operator"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``run``."""
    parser.add_argument(
        "--namespace", action="append", default=[], help="watch only this namespace"
    )
    parser.add_argument("--standalone", action="store_true", help="no peering (single replica)")
    parser.add_argument("--peering", default=DEFAULT_PEERING, help="ClusterKopfPeering name (HA)")
    parser.add_argument(
        "--priority", type=int, default=None, help="peering priority (default: random)"
    )
    parser.add_argument("--health-address", default="0.0.0.0", help="bind address of /healthz")
    parser.add_argument("--health-port", type=int, default=8080, help="port of /healthz")
    parser.add_argument("--metrics-address", default="0.0.0.0", help="bind address of /metrics")
    parser.add_argument(
        "--metrics-port", type=int, default=9090, help="port of Prometheus /metrics"
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR")
    )
    parser.add_argument(
        "--no-compute-domain",
        dest="compute_domain",
        action="store_false",
        help="never create NVIDIA ComputeDomains (IMEX channels) for multi-node NVLink replicas",
    )
    parser.add_argument(
        "--router-image",
        default=DEFAULT_ROUTER_IMAGE,
        help="image of the vLLM router a serving runs when its spec.router.image is unset",
    )
    parser.add_argument(
        "--fill-image",
        default=DEFAULT_FILL_IMAGE,
        help="image of the fill Jobs of spec.modelCache.fill: the operator's own image (it runs "
        "deepseek-operator fill-weights)",
    )


def run(args: argparse.Namespace) -> int:
    """Run the operator until it is stopped."""
    from deepseek_operator.controller.main import run_operator

    return run_operator(args)
