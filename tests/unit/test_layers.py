"""The import contracts of ``[tool.importlinter]`` in pyproject.toml, checked by import-linter.

cli → commands → controller | agent → kube → actions → plan → render → engine → nodes → api → catalog →
names | errors: a module imports its own package and lower layers only, never a sibling of its
rank (the controller and the agent never import each other); no package has an import circle;
the pure core imports no Kubernetes client, kopf or NVML. ``make lint`` runs ``lint-imports``;
these tests run the same contracts under pytest and check what import-linter cannot: that every
top-level module of the package has a place in the layers (a new one would otherwise be bound
by nothing), and that no module of the package is over 400 lines.
"""

from __future__ import annotations

import pathlib
import tomllib
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
PKG = ROOT / "operator/deepseek_operator"


def _config() -> dict[str, Any]:
    return dict(tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"])


def _contract(contract_id: str) -> dict[str, Any]:
    return next(c for c in _config()["contracts"] if c.get("id") == contract_id)


def test_every_top_level_module_has_a_layer() -> None:
    layered = {
        name.strip().removeprefix("deepseek_operator.")
        for layer in _contract("layers")["layers"]
        for name in layer.split("|")
    }
    modules = {
        p.stem if p.is_file() else p.name
        for p in PKG.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()
    }
    assert modules == layered


MODULE_LINES = 400
"""The most lines one module of the package may have: past it, a module holds more than one
concept and is split along its seams (CONTRIBUTING.md)."""


def test_no_module_of_the_package_is_over_400_lines() -> None:
    sizes = {str(p.relative_to(PKG)): len(p.read_text().splitlines()) for p in PKG.rglob("*.py")}
    over = {name: n for name, n in sorted(sizes.items()) if n > MODULE_LINES}
    assert not over, f"modules over {MODULE_LINES} lines: {over}"


def test_the_import_contracts_are_kept(capsys: pytest.CaptureFixture[str]) -> None:
    configuration = pytest.importorskip("importlinter.configuration")
    from importlinter.application import use_cases

    configuration.configure()  # what the `lint-imports` command does first: the readers
    kept = use_cases.lint_imports(config_filename=str(PYPROJECT), cache_dir=None, no_logo=True)
    assert kept, capsys.readouterr().out
