"""The pure core imports no kopf / kubernetes / pynvml and reads neither the clock nor the env."""

from __future__ import annotations

import ast
import pathlib

import pytest

PKG = pathlib.Path(__file__).resolve().parents[2] / "operator/deepseek_operator"
PURE = ["api", "catalog", "nodes", "engine", "render", "plan", "actions"]
# The agent's pure half (its model, the topo -m parser, the label encoder) and the bottom modules.
PURE_MODULES = [
    "names.py",
    "errors.py",
    "recent.py",
    "agent/gpu_topology.py",
    "agent/topo_smi.py",
    "agent/labels.py",
]
FORBIDDEN_MODULES = {"kopf", "kubernetes", "pynvml", "aiohttp", "time", "datetime", "os", "random"}
EXEMPT: set[pathlib.Path] = set()


def _pure_files() -> list[pathlib.Path]:
    files = [p for d in PURE for p in sorted((PKG / d).rglob("*.py"))]
    return [p for p in files + [PKG / m for m in PURE_MODULES] if p not in EXEMPT]


@pytest.mark.parametrize("path", _pure_files(), ids=lambda p: str(p.relative_to(PKG)))
def test_pure_module_has_no_forbidden_imports(path: pathlib.Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            assert name.split(".")[0] not in FORBIDDEN_MODULES, f"{path.name} imports {name}"


def test_only_nvml_module_imports_pynvml() -> None:
    for path in PKG.rglob("*.py"):
        if path.name == "nvml.py" and path.parent.name == "agent":
            continue
        assert "import pynvml" not in path.read_text(), path
