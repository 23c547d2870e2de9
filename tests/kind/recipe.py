"""The README's kind recipe as the script the kind tier runs.

The recipe is read from the README's section "### With Docker: kind" (its first ``sh`` block) and
run with bash, with one declared substitution: ``docker build`` (of the operator's image and of
the router's, target ``router``) would pull the Python base image, so the offline build of the same
Dockerfile (``hack/build-image.sh``, which builds both targets) builds them under the same tags.
The cache directory the README names (``~/.cache/deepseek-operator``) becomes ``DSO_CACHE`` when
that is set.
"""

from __future__ import annotations

import os
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
SECTION = "### With Docker: kind"
CACHE = pathlib.Path(os.environ.get("DSO_CACHE", "~/.cache/deepseek-operator")).expanduser()
# `docker build` pulls python:3.11.7-slim-bookworm; here no registry answers.
OFFLINE_BUILD = {
    "docker build -t deepseek-operator:dev .": "DSO_IMAGE=deepseek-operator:dev hack/build-image.sh >/dev/null",
    # The same script builds the router target too; run again (cached: seconds) under the README's tag.
    "docker build --target router -t deepseek-operator-router:dev .": (
        "DSO_IMAGE=deepseek-operator:dev DSO_ROUTER_IMAGE=deepseek-operator-router:dev"
        " hack/build-image.sh >/dev/null"
    ),
}


def code_blocks(section: str) -> list[list[str]]:
    """The ``sh`` code blocks of README section *section*, as commands (continuations joined)."""
    text = README[README.index(section) :]
    text = text[: text.index("\n## ", 1)]
    blocks = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", "", block)
        blocks.append(
            [line.split("  #")[0].strip() for line in joined.splitlines() if line.strip()]
        )
    return blocks


def recipe_commands() -> list[str]:
    """The recipe's commands, substituted as the module docstring says."""
    commands = []
    for command in code_blocks(SECTION)[0]:
        for online, local in OFFLINE_BUILD.items():
            command = command.replace(online, local)
        for home in ("~/.cache/deepseek-operator", "$HOME/.cache/deepseek-operator"):
            command = command.replace(home, str(CACHE))
        commands.append(command)
    return commands


def readme_recipe() -> str:
    """The README's kind recipe as a bash script."""
    commands = recipe_commands()
    builds = [c for c in commands if "hack/build-image.sh" in c]
    assert len(builds) == len(OFFLINE_BUILD), "the README's docker build lines moved"
    return "\n".join(commands)
