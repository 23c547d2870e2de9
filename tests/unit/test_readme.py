"""The examples of README.md and docs/ work, and the generated API reference is current."""

from __future__ import annotations

import json
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

from hack.api_reference import BEGIN, END, PAGE, reference

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
# Every page a user reads: the landing page and the docs/ tree.
PAGES = {"README.md": README} | {
    str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "docs").rglob("*.md"))
}
DOCS = "\n".join(PAGES.values())

EXAMPLES = list(
    dict.fromkeys(
        line.strip()
        for text in PAGES.values()
        for line in text.splitlines()
        if line.strip().startswith(".venv/bin/deepseek-operator ")
    )
)


def test_api_reference_block_is_current() -> None:
    text = PAGE.read_text()
    block = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert block == reference(), "docs/reference/api.md is stale: run `make generate`"


def test_readme_links_the_examples_and_the_docs() -> None:
    # The landing page keeps at least one runnable example and points into docs/.
    assert any(".venv/bin/deepseek-operator render " in line for line in README.splitlines())
    assert "docs/index.md" in README


@pytest.mark.parametrize(
    "command", EXAMPLES, ids=lambda c: c.split(" ", 2)[1] + " example from the docs works"
)
def test_readme_command_examples_run(command: str) -> None:
    argv = shlex.split(command)
    argv[0] = str(pathlib.Path(sys.executable).parent / "deepseek-operator")
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    # Each example prints what the command table (docs/operations.md) promises for it.
    if argv[1] == "render" and "json" in argv:
        printed = json.loads(out.stdout)
        assert set(printed) == {"status", "objects"}
        assert (
            printed["status"]["resolved"]["moeBackend"]
            in printed["objects"][0]["spec"]["template"]["spec"]["containers"][0]["args"]
        )
    elif argv[1] == "render":
        assert re.search(r"rendered --moe-backend \S+", out.stdout), out.stdout
        assert re.search(r"^  RULE +CHECK +RESULT +OBSERVED$", out.stdout, re.M), out.stdout
        assert re.search(r"^  vllm serve \S+ .*--moe-backend ", out.stdout, re.M), out.stdout
    else:
        assert argv[1] == "topology"
        assert re.search(r"^gpu\.deepseek-operator\.io/nvlink\.fully-connected +(true|false)$", out.stdout, re.M), out.stdout  # fmt: skip


def test_docs_mention_every_condition_reason_and_command() -> None:
    from deepseek_operator import names

    reasons = [v for k, v in vars(names).items() if k.startswith("REASON_")]
    for reason in reasons:
        assert reason in DOCS, reason
    for command in ("render", "crds", "topology", "run", "agent"):
        assert f"deepseek-operator {command}" in DOCS
