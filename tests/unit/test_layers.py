"""The layer contract: imports run one way (docs/design.md), checked by walking every import.

catalog → api → nodes → engine → render → plan → controller / commands, with the agent beside
the controller; ``names`` and ``errors`` sit below everything and import nothing of ours. A
module may import its own package and any lower layer, never a higher one nor a sibling at its
own rank (the controller and the agent never import each other). Imports inside functions count.
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
    "controller": 7,
    "agent": 7,
    "commands": 8,
    "cli": 9,
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


def import_graph(package_dir: pathlib.Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (``from pkg import mod`` names ``pkg.mod``).

    Every import counts: at module level, inside functions and under ``TYPE_CHECKING``.
    """
    sources = {_module_name(path, package_dir): path for path in sorted(package_dir.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in sources.items():
        edges: set[str] = set()
        tree = ast.parse(path.read_text())
        for target in imported_modules(path.read_text(), module, path.name == "__init__.py"):
            if target in sources:
                edges.add(target)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in sources:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    if sub in sources:  # ``from pkg import mod``: the module, not its package
                        edges.add(sub)
                        edges.discard(node.module)
        edges.discard(module)
        graph[module] = edges
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


def test_no_module_imports_itself_through_others() -> None:
    assert import_cycles(import_graph(PKG)) == []


def test_an_import_circle_is_found(tmp_path: pathlib.Path) -> None:
    package = tmp_path / ROOT_PACKAGE
    (package / "api").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "api" / "__init__.py").write_text("")
    (package / "api" / "spec.py").write_text("from deepseek_operator.api import rules\n")
    (package / "api" / "rules.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from deepseek_operator.api.spec import Spec\n"
    )
    assert import_cycles(import_graph(package)) == [
        ["deepseek_operator.api.rules", "deepseek_operator.api.spec"]
    ]
