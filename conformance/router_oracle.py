"""vllm-router's own answer about rendered router argv, in one process.

Run with the router's virtualenv python (hack/install-vllm-router.sh) from the repository root;
reads a JSON array of argv lists on stdin, writes a JSON array of answers (same order) on stdout:

    ~/.cache/deepseek-operator/vllm-router/0.1.17/bin/python -m conformance.router_oracle < cases.json

Each argv goes through exactly what the ``vllm-router`` console script runs before it starts the
Rust core: ``vllm_router.launch_router.parse_router_args`` (argparse with the flags of
``vllm_router/router_args.py``, then ``RouterArgs.from_cli_args``) and
``RouterArgs._validate_router_args``. An answer: ``accepted`` and, when accepted, what the router
read (mode, policy, discovery namespace and port, the selectors as dicts); else ``error``, the
parser's own message (argparse exits with status 2 and writes it on stderr).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from typing import Any


def answer(argv: list[str]) -> dict[str, Any]:
    """What vllm-router makes of ``argv`` (its program name excluded)."""
    from vllm_router.launch_router import parse_router_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parse_router_args(argv)
            args._validate_router_args()
    except SystemExit:
        return {"accepted": False, "error": err.getvalue().strip().splitlines()[-1:]}
    except ValueError as exc:
        return {"accepted": False, "error": [str(exc)]}
    return {
        "accepted": True,
        "pd": args.vllm_pd_disaggregation,
        "policy": args.policy,
        "host": args.host,
        "port": args.port,
        "service_discovery": args.service_discovery,
        "namespace": args.service_discovery_namespace,
        "discovery_port": args.service_discovery_port,
        "selector": args.selector,
        "prefill_selector": args.prefill_selector,
        "decode_selector": args.decode_selector,
        "kv_connector": args.kv_connector,
    }


def main() -> None:
    """Answer every argv on stdin."""
    cases = json.load(sys.stdin)
    json.dump([answer(a) for a in cases], sys.stdout)


if __name__ == "__main__":
    main()
