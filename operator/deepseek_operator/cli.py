"""Command line: ``deepseek-operator run | agent | render | topology | crds | fill-weights``.

Wiring only: each subcommand's module under :mod:`deepseek_operator.commands` owns its flags
(``add_arguments``) and its behaviour (``run``). ``run`` and ``agent`` import kopf, the
Kubernetes client and pynvml only when they run, and ``fill-weights`` the Hugging Face client, so
``render`` and ``crds`` never pay for them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from deepseek_operator.commands import agent, crds, fill_weights, render, run, topology
from deepseek_operator.names import PROJECT

# In the order ``--help`` lists them.
COMMANDS = (render, crds, topology, run, agent, fill_weights)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROJECT,
        description="Serve DeepSeek V4/V4.1 with vLLM on Kubernetes, choosing the MoE backend "
        "from the GPUs the cluster has.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_arguments(sub.add_parser(command.NAME, help=command.HELP))
        sub.choices[command.NAME].set_defaults(handler=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen subcommand; return the process exit code."""
    args = _build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except BrokenPipeError:
        # The reader went away (``render ... | head``): that is the reader's choice, not an
        # error worth a traceback. Point stdout at /dev/null so the interpreter's final flush
        # does not raise again, and exit like a shell pipeline member killed by SIGPIPE.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13
    except KeyboardInterrupt:
        print(f"{PROJECT}: interrupted", file=sys.stderr)
        return 128 + 2


if __name__ == "__main__":
    sys.exit(main())
