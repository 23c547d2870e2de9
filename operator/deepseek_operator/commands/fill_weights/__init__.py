"""``deepseek-operator fill-weights --model ORG/NAME --revision REV``: a hub cache filled once.

Fills a Hugging Face hub cache (``$HF_HOME/hub``, the layout vLLM reads with ``HF_HUB_OFFLINE=1``)
with one checkpoint at one revision, through the real ``huggingface_hub`` client: ``HF_ENDPOINT``
picks the hub (a mirror, or the tests' stand-in), the token comes from ``--token-file`` (a Secret
mounted as a file) or ``HF_TOKEN``, and is never printed. Progress goes to stdout as JSON lines
(``plan``, ``progress``, ``done``); a failure ends with one ``error`` line naming the cause, the
same line on stderr, and the cause's exit code (:data:`.plan.EXIT_CODES`, listed in the README).
A rerun after an interruption resumes the parts on the volume; a complete cache fetches nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from deepseek_operator.commands.fill_weights.plan import (
    EXIT_CODES,
    FillError,
    validate_repo_id,
)
from deepseek_operator.names import PROJECT

NAME = "fill-weights"
HELP = "fill a Hugging Face hub cache with a checkpoint at a pinned revision (resumable)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``fill-weights``."""
    parser.add_argument(
        "--model", required=True, help="repository id, e.g. deepseek-ai/DeepSeek-V4.1-Flash"
    )
    parser.add_argument(
        "--revision",
        required=True,
        help="commit hash (pinned; recommended), branch or tag; a branch or tag is resolved "
        "once and recorded under refs/",
    )
    parser.add_argument(
        "--hf-home",
        help="HF_HOME of the pods that read the cache (spec.modelCache.mountPath); the cache is "
        "its hub/ folder. Default: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub",
    )
    parser.add_argument(
        "--token-file",
        help="file holding the Hugging Face token (a mounted Secret); default: $HF_TOKEN, if set",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=4,
        help="files downloaded at once (default 4; 1 to 64)",
    )
    parser.add_argument(
        "--progress-interval",
        type=float,
        default=5.0,
        help="seconds between progress lines while a file downloads (default 5)",
    )
    parser.add_argument(
        "--termination-log",
        help="file that gets the failure's one line (a container's terminationMessagePath, "
        "read by the operator as the pod's terminated message); default: none",
    )


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _token(path: str | None) -> str | None:
    if path is None:
        return os.environ.get("HF_TOKEN") or None
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise FillError("bad-input", f"--token-file {path}: {exc.strerror}") from None
    if not token or any(c.isspace() for c in token):
        raise FillError(
            "bad-input",
            f"--token-file {path} must hold one token on one line (it is empty or has spaces)",
        )
    return token


def _termination_log(path: str | None, line: str) -> None:
    """Write ``line`` where the kubelet reads a terminated container's message (best effort:
    the same line is on stderr and stdout)."""
    if not path:
        return
    # The kubelet keeps at most 4096 bytes of it; the line is cut well below that.
    with contextlib.suppress(OSError):
        Path(path).write_text(line[:2000] + "\n", encoding="utf-8")


def _cache_dir(hf_home: str | None) -> Path:
    if hf_home:
        return Path(hf_home) / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def run(args: argparse.Namespace) -> int:
    """Fill the cache; 0 when it holds the checkpoint, else the cause's exit code."""
    # Before huggingface_hub is imported (it reads its settings once): no telemetry. With it on,
    # the client's user-agent fetches {endpoint}/api/agent-harnesses and caches the answer in
    # $HF_HOME, i.e. on the cache volume; a fill Job has no use for either.
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    from deepseek_operator.commands.fill_weights import fetch

    try:
        repo_id = validate_repo_id(args.model)
        if not args.revision.strip() or args.revision.startswith("/") or ".." in args.revision:
            raise FillError(
                "bad-input", f"--revision {args.revision!r} must be a commit hash, branch or tag"
            )
        if not 1 <= args.workers <= 64:
            raise FillError("bad-input", f"--workers {args.workers} must be between 1 and 64")
        if args.progress_interval < 0:
            raise FillError("bad-input", "--progress-interval must be 0 or more seconds")
        token = _token(args.token_file)
        cache = _cache_dir(args.hf_home)
        cache.mkdir(parents=True, exist_ok=True)
        done = fetch.fill(
            cache, repo_id, args.revision, token, _emit, args.progress_interval, args.workers
        )
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # every error ends as one line: the user never sees a traceback
        error = fetch.cause_of(exc)
        _emit(
            {
                "event": "error",
                "cause": error.cause,
                "exitCode": error.exit_code,
                "message": error.message,
            }
        )
        line = f"{error.cause}: {error.message}"
        print(f"{PROJECT} {NAME}: {line}", file=sys.stderr)
        _termination_log(args.termination_log, line)
        return error.exit_code
    _emit(done)
    return 0


__all__ = ["EXIT_CODES", "HELP", "NAME", "add_arguments", "run"]
