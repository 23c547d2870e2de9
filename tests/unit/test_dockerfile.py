"""Static checks of the Dockerfile: hygiene and CI parity (tests/container builds and runs it).

Hygiene: multi-stage, every base image pinned to a full version (no ``latest``; a base named by a
build argument is pinned by the argument's default), a numeric
non-root ``USER`` in the final stage, no compilers or build tools there, the documented
entrypoint. Parity: the image installs the project the way CI's ``make venv`` does — the same
constraints file and the project root as the package spec — so the image runs the dependency
versions the tests ran; and every runtime dependency is pinned in that file.
"""

from __future__ import annotations

import json
import pathlib
import re
import shlex
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD_TOOLS = re.compile(
    r"\b(gcc|g\+\+|cc|clang|make|build-essential|python3-dev|libc6-dev|cmake)\b"
)


def parse_dockerfile(text: str) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` pairs, continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    buffer = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buffer and (not line or line.startswith("#")):
            continue
        if buffer and line.startswith("#"):
            continue
        if line.endswith("\\"):
            buffer += line[:-1].rstrip() + " "
            continue
        buffer += line
        keyword, _, args = buffer.partition(" ")
        instructions.append((keyword.upper(), args.strip()))
        buffer = ""
    assert not buffer, "the Dockerfile ends in a continuation line"
    return instructions


INSTRUCTIONS = parse_dockerfile((ROOT / "Dockerfile").read_text())


def stages() -> list[list[tuple[str, str]]]:
    out: list[list[tuple[str, str]]] = []
    for keyword, args in INSTRUCTIONS:
        if keyword == "FROM":
            out.append([])
        if out:
            out[-1].append((keyword, args))
    return out


def stage(name: str) -> list[tuple[str, str]]:
    """The instructions of the stage ``FROM ... AS name``."""
    for one in stages():
        if one[0][1].split()[-1] == name:
            return one
    raise AssertionError(f"no stage {name}")


def test_parser_joins_continuations_and_skips_comments() -> None:
    parsed = parse_dockerfile("# c\nFROM a:1.2.3 AS b\nRUN x \\\n  # inner\n  && y\nUSER 1\n")
    assert parsed == [("FROM", "a:1.2.3 AS b"), ("RUN", "x && y"), ("USER", "1")]


def test_multi_stage() -> None:
    assert len(stages()) >= 2
    final = stages()[-1]
    assert any(k == "COPY" and "--from=" in a for k, a in final), (
        "the final stage copies the build's result"
    )


def global_args() -> dict[str, str]:
    """The ``ARG name=default`` declarations before the first ``FROM`` (usable in ``FROM``)."""
    args: dict[str, str] = {}
    for keyword, rest in INSTRUCTIONS:
        if keyword == "FROM":
            break
        if keyword == "ARG":
            name, _, default = rest.partition("=")
            args[name.strip()] = default.strip().strip('"')
    return args


def resolve(image: str) -> str:
    """*image* with ``${NAME}`` / ``$NAME`` replaced by the global ARG defaults."""
    args = global_args()
    out = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m[1] or m[2], m[0]), image)
    assert "$" not in out, f"{image}: a build argument without a default in the Dockerfile"
    return out


def test_resolve_uses_the_global_arg_defaults() -> None:
    assert resolve("${BASE_IMAGE}") == "python:3.11.7-slim-bookworm"
    assert resolve("$BASE_IMAGE") == resolve("${BASE_IMAGE}")


def test_every_stage_starts_from_the_same_base_argument() -> None:
    # hack/build-image.sh swaps the base with one --build-arg: both stages must follow it (the
    # venv copied into the runtime stage points at the build stage's Python).
    bases = [a.split()[0] for k, a in INSTRUCTIONS if k == "FROM"]
    assert bases == ["${BASE_IMAGE}"] * len(bases)


@pytest.mark.parametrize("image", [a.split()[0] for k, a in INSTRUCTIONS if k == "FROM"])
def test_base_images_are_pinned(image: str) -> None:
    names = {a.split()[-1] for k, a in INSTRUCTIONS if k == "FROM" and " AS " in a.upper()}
    if image in names:
        return  # a previous stage
    image = resolve(image)
    name, _, tag = image.partition("@")[0].partition(":")
    assert tag and tag != "latest", f"{image}: pin a tag, never latest"
    assert re.match(r"\d+\.\d+\.\d+", tag) or "@sha256:" in image, f"{image}: pin a full version"
    assert name == "python" and tag.startswith("3.11"), "the base is the Python CI runs (3.11)"


def test_final_stage_runs_as_numeric_non_root_user() -> None:
    users = [a for k, a in stages()[-1] if k == "USER"]
    assert users, "the final stage sets USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "numeric, non-root (runAsNonRoot verifies a number)"
    last_user = max(i for i, (k, _) in enumerate(stages()[-1]) if k == "USER")
    assert not any(k == "RUN" for k, _ in stages()[-1][last_user:]), (
        "nothing runs as root after USER"
    )


def test_final_stage_has_no_build_tools() -> None:
    for keyword, args in stages()[-1]:
        if keyword == "RUN":
            assert not BUILD_TOOLS.search(args), f"build tool in the final stage: {args}"
            assert "apt-get install" not in args and "pip install" not in args


def test_entrypoint_and_default_command() -> None:
    final = dict(stages()[-1])
    assert json.loads(final["ENTRYPOINT"]) == ["deepseek-operator"]
    assert json.loads(final["CMD"]) == ["run"]


def _pip_install(command: str) -> tuple[str, list[str]]:
    """The constraints file and package specs of the ``pip install`` in a shell command."""
    for part in re.split(r"&&|;|\n", command):
        words = shlex.split(part)
        if "pip" in " ".join(words[:1]) and "install" in words:
            words = words[words.index("install") + 1 :]
            constraints = ""
            specs: list[str] = []
            skip = False
            for i, word in enumerate(words):
                if skip:
                    skip = False
                    continue
                if word in ("-c", "--constraint"):
                    constraints, skip = words[i + 1], True
                elif word == "-e":
                    continue
                elif not word.startswith("-"):
                    specs.append(word)
            if specs and specs != ["--upgrade", "pip"] and "pip" not in specs:
                return constraints, specs
    return "", []


def _makefile_install() -> tuple[str, list[str]]:
    text = (ROOT / "Makefile").read_text()
    venv_recipe = text[text.index("$(BIN)/deepseek-operator: pyproject.toml") :].split("\n\n")[0]
    for line in venv_recipe.splitlines():
        constraints, specs = _pip_install(line.strip())
        if specs:
            return constraints, specs
    raise AssertionError("no pip install in the Makefile's venv recipe")


def test_ci_installs_through_the_makefile() -> None:
    assert re.search(r"^make test\b", (ROOT / ".ci" / "run").read_text(), re.M), (
        ".ci/run installs via `make test` → `make venv`"
    )


def test_image_installs_like_ci() -> None:
    ci_constraints, ci_specs = _makefile_install()
    image = [_pip_install(a) for k, a in stage("build") if k == "RUN"]
    image = [i for i in image if i[1]]
    assert len(image) == 1, "exactly one pip install of the project in the build stage"
    constraints, specs = image[0]
    assert constraints == ci_constraints == "constraints.txt"
    # CI installs the project root with its dev extra (editable); the image the same root, no extras.
    assert [re.sub(r"\[.*\]$", "", s) for s in ci_specs] == ["."] and specs == ["."]
    copied = " ".join(a for k, a in stage("build") if k == "COPY")
    for needed in ("pyproject.toml", "constraints.txt", "operator/"):
        assert needed in copied


def test_dockerignore_lets_the_copied_files_in() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    for needed in ("pyproject.toml", "constraints.txt", "operator/"):
        assert f"!{needed}" in lines


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_runtime_dependency_is_pinned_in_the_constraints_file() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {
        _norm(line.split("==")[0])
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line
    }
    for dep in project["dependencies"]:
        name = re.match(r"[A-Za-z0-9_.\-]+", dep)
        assert name and _norm(name.group(0)) in pins, f"{dep} is not pinned in constraints.txt"


def test_router_image_installs_the_pinned_router_alone() -> None:
    # The router image: vllm-router and its pinned dependencies (--no-deps: nothing unpinned),
    # a numeric non-root user, vllm-router as entrypoint; its pin is the release the operator
    # renders flags for.
    from deepseek_operator.names import VLLM_ROUTER_VERSION

    build = " ".join(a for k, a in stage("router-build") if k == "RUN")
    assert "--no-deps -r router-requirements.txt" in build
    pins = (ROOT / "router-requirements.txt").read_text().splitlines()
    assert f"vllm-router=={VLLM_ROUTER_VERSION}" in pins
    assert all("==" in p for p in pins if p and not p.startswith("#")), "every line pinned"
    final = dict(stage("router"))
    assert json.loads(final["ENTRYPOINT"]) == ["vllm-router"]
    assert final["USER"].split(":")[0] == "65532"
    assert "!router-requirements.txt" in (ROOT / ".dockerignore").read_text().splitlines()
    # The last stage is still the operator's: `docker build .` without --target builds it.
    assert stages()[-1] == stage("runtime")
