"""The one way the harnesses run a vLLM release's own code: its virtualenv's python, a module.

Each supported release lives in its own cached virtualenv (hack/install-vllm.sh installs
``$DSO_CACHE/vllm/<release>``), never in the operator's; an oracle module (conformance/oracle.py,
pd_oracle.py, capacity_oracle.py) runs there in ONE process per release, reads every question as JSON on stdin and
writes its answers as one JSON line on stdout. The harnesses launch it through :func:`ask`
(or :func:`run_module` where a failure is a finding rather than the end of the run).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("DSO_CACHE", Path.home() / ".cache/deepseek-operator"))


def oracle_python(release: str) -> Path:
    """The release's virtualenv python (hack/install-vllm.sh installs it)."""
    return CACHE / "vllm" / release / "bin/python"


def run_module(
    release: str, module: str, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` in the release's virtualenv, from the repository root.

    A release that is not installed stops the run with one line saying how to install it.
    """
    return _run_python(release, "-m", module, *args, stdin=stdin)


def run_code(release: str, code: str) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in the release's virtualenv (a probe of what the release contains)."""
    return _run_python(release, "-c", code)


def _run_python(
    release: str, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    python = oracle_python(release)
    if not python.exists():
        raise SystemExit(
            f"error: vLLM {release} is not installed ({python} missing): "
            f"run hack/install-vllm.sh {release}"
        )
    return subprocess.run(
        [str(python), *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


def ask(release: str, module: str, questions: Any) -> dict[str, Any]:
    """Send ``questions`` (JSON) to the oracle ``module`` of ``release``; its answer object.

    The answer is the last line of stdout: a release may print a line of its own on import. A
    failed oracle stops the run with the end of its stderr.
    """
    proc = run_module(release, module, stdin=json.dumps(questions))
    if proc.returncode != 0:
        raise SystemExit(f"error: the vLLM {release} oracle failed:\n{proc.stderr[-4000:]}")
    lines = proc.stdout.strip().splitlines()
    answer: dict[str, Any] = json.loads(lines[-1] if lines else "")
    return answer
