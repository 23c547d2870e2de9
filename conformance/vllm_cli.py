"""vLLM's own `vllm serve` command line, built the way `vllm.entrypoints.cli.main` builds it.

Runs inside one release's virtualenv (hack/install-vllm.sh), never in the operator's. Importing
this module imports vLLM with `VLLM_TARGET_DEVICE=cpu`, so no GPU and no CUDA driver are needed.
"""

from __future__ import annotations

import argparse
import logging
import os

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
# vLLM logs a warning per deprecated flag and per --model use; the harness reports results itself.
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
logging.disable(logging.WARNING)

import vllm  # noqa: E402
from vllm.engine.arg_utils import AsyncEngineArgs  # noqa: E402
from vllm.entrypoints.cli.serve import ServeSubcommand  # noqa: E402
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402


class ParserExit(Exception):
    """argparse wanted to exit (an error or --help); `message` is what it would have printed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _no_exit(parser: argparse.ArgumentParser) -> None:
    """Make `parser` and its subparsers raise ParserExit instead of calling sys.exit."""

    def exit_(status: int = 0, message: str | None = None) -> None:
        raise ParserExit(status, (message or "").strip())

    def error(message: str) -> None:
        raise ParserExit(2, message)

    parser.exit = exit_  # type: ignore[method-assign]
    parser.error = error  # type: ignore[method-assign]


def release() -> str:
    """The vLLM release this interpreter imports."""
    return str(vllm.__version__)


def build_parsers() -> tuple[FlexibleArgumentParser, FlexibleArgumentParser]:
    """The top-level `vllm` parser (with the `serve` subcommand) and the serve subparser."""
    top = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    serve = ServeSubcommand().subparser_init(subparsers)
    _no_exit(top)
    _no_exit(serve)
    return top, serve


def parse_serve(top: FlexibleArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse `argv` (starting at `serve`) and run `vllm serve`'s own validation of the result."""
    args = top.parse_args(argv)
    ServeSubcommand().validate(args)
    return args


def engine_args(args: argparse.Namespace) -> AsyncEngineArgs:
    """`AsyncEngineArgs.from_cli_args`, what `vllm serve` builds the engine from."""
    return AsyncEngineArgs.from_cli_args(args)
