"""The layer contract: imports run one way (docs/design.md), checked by walking every import.

catalog → api → nodes → engine → render → plan → actions → controller / commands, with the
agent beside the controller; ``names`` and ``errors`` sit below everything and import nothing of
ours. A module may import its own package and any lower layer, never a higher one nor a sibling
at its own rank (the controller and the agent never import each other). Imports inside functions
count.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PKG = pathlib.Path(__file__).resolve().parents[2] / "operator/deepseek_operator"
ROOT_PACKAGE = "deepseek_operator"

# Lower rank = lower layer. Same rank, different layer: neither may import the other.
RANKS: dict[str, int] = {
    "names": 0,
    "errors": 0,
    "catalog": 1,
    "api": 2,
    "nodes": 3,
    "engine": 4,
    "render": 5,
    "plan": 6,
    "actions": 7,
    "controller": 8,
    "agent": 8,
    "commands": 9,
    "cli": 10,
}


def layer_of(module: str) -> str | None:
    """``deepseek_operator.engine.decision`` → ``engine``; None outside the package or at its root."""
    parts = module.split(".")
    if parts[0] != ROOT_PACKAGE or len(parts) < 2:
        return None
    return parts[1]


def _module_name(path: pathlib.Path, package_dir: pathlib.Path) -> str:
    relative = path.relative_to(package_dir.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str, is_package: bool) -> list[str]:
    """Absolute names of every module ``source`` imports (relative imports resolved)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.append(target)
            # ``from deepseek_operator import names`` imports the module ``names``.
            found += [f"{target}.{alias.name}" for alias in node.names if target == ROOT_PACKAGE]
    return found


def violations(package_dir: pathlib.Path) -> list[str]:
    """Every import in ``package_dir`` that runs against the layer order."""
    problems: list[str] = []
    for path in sorted(package_dir.rglob("*.py")):
        module = _module_name(path, package_dir)
        own = layer_of(module)
        if own is None:
            continue
        if own not in RANKS:
            problems.append(f"{module}: layer {own!r} has no rank in the layer contract")
            continue
        for target in imported_modules(path.read_text(), module, path.name == "__init__.py"):
            other = layer_of(target)
            if other is None or other == own:
                continue
            if other not in RANKS:
                problems.append(f"{module} imports {target}: layer {other!r} has no rank")
            elif RANKS[other] >= RANKS[own]:
                problems.append(
                    f"{module} ({own}, rank {RANKS[own]}) imports {target} "
                    f"({other}, rank {RANKS[other]})"
                )
    return problems


def test_imports_run_one_way() -> None:
    assert violations(PKG) == []


def test_every_layer_of_the_package_has_a_rank() -> None:
    layers = {p.stem if p.is_file() else p.name for p in PKG.iterdir() if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())}  # fmt: skip
    assert layers - {"__init__"} == set(RANKS)


@pytest.mark.parametrize(
    ("layer", "source", "expected"),
    [
        pytest.param(
            "engine",
            "from deepseek_operator.render.workload import render_objects\n",
            "imports deepseek_operator.render.workload",
            id="engine imports render",
        ),
        pytest.param(
            "api",
            "def f():\n    from deepseek_operator.controller import kube\n",
            "imports deepseek_operator.controller",
            id="lazy import from a function",
        ),
        pytest.param(
            "nodes",
            "from deepseek_operator import plan\n",
            "imports deepseek_operator.plan",
            id="from package import module",
        ),
        pytest.param(
            "controller",
            "import deepseek_operator.agent.nvml\n",
            "imports deepseek_operator.agent.nvml",
            id="controller imports the agent",
        ),
        pytest.param(
            "catalog",
            "from ..api import spec\n",
            "imports deepseek_operator.api",
            id="relative upward import",
        ),
    ],
)
def test_an_upward_import_fails_the_contract(
    tmp_path: pathlib.Path, layer: str, source: str, expected: str
) -> None:
    package = tmp_path / ROOT_PACKAGE
    (package / layer).mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / layer / "__init__.py").write_text("")
    (package / layer / "bad.py").write_text(source)
    found = violations(package)
    assert len(found) == 1 and expected in found[0], found


def test_a_downward_import_passes(tmp_path: pathlib.Path) -> None:
    package = tmp_path / ROOT_PACKAGE
    (package / "render").mkdir(parents=True)
    (package / "render" / "ok.py").write_text(
        "from deepseek_operator.engine.decision import resolve\nfrom deepseek_operator import names\n"
    )
    assert violations(package) == []
