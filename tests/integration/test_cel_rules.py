"""The CRD's CEL rules and their pydantic twins refuse the same CRs with the same message."""

from __future__ import annotations

import pathlib
import subprocess
import sys
from typing import Any

import pytest
import yaml

from deepseek_operator.api.rules.check import SPEC_RULES
from tests.k8s.cluster import ControlPlane
from tests.unit.test_disaggregation_api import CASES as ROLE_CASES

REPO = pathlib.Path(__file__).resolve().parents[2]
INVALID = sorted((REPO / "tests/fixtures/invalid").glob("*.yaml"))


@pytest.fixture
def crd_installed(crds: ControlPlane) -> ControlPlane:
    """The control plane with our CRDs (the session ``crds`` fixture)."""
    return crds


def _rule_for(path: pathlib.Path) -> str:
    return path.read_text().splitlines()[0].removeprefix("# rule: ").strip()


def _path_for(path: pathlib.Path, default: str) -> str:
    """The refused field: a ``# path:`` second line (a rule on a role's node), else ``default``."""
    second = path.read_text().splitlines()[1]
    return second.removeprefix("# path: ").strip() if second.startswith("# path: ") else default


@pytest.mark.integration
@pytest.mark.parametrize(
    "path", INVALID, ids=lambda p: f"{p.stem} refused by the API server and by render alike"
)
def test_api_server_and_render_refuse_with_the_same_message(
    crd_installed: ControlPlane, namespace: str, path: pathlib.Path
) -> None:
    rule = next(r for r in SPEC_RULES if r.name == _rule_for(path))
    doc = yaml.safe_load(path.read_text())
    doc["metadata"]["namespace"] = namespace
    server = crd_installed.kubectl(
        "apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(doc), check=False
    )
    assert server.returncode != 0, f"API server accepted {path.name}"
    field = _path_for(path, rule.full_path)
    assert rule.message in server.stderr, server.stderr
    assert field in server.stderr
    offline = subprocess.run(
        [sys.executable, "-m", "deepseek_operator.cli", "render", "-f", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert offline.returncode == 1
    assert rule.message in offline.stderr
    assert field in offline.stderr


@pytest.mark.integration
@pytest.mark.parametrize(
    ("mutate", "field", "rule_name"),
    [c[1:] for c in ROLE_CASES],
    ids=[f"{c[0]}: the API server and render agree" for c in ROLE_CASES],
)
def test_role_refusals_match_the_api_server(
    crd_installed: ControlPlane, namespace: str, mutate: Any, field: str, rule_name: str
) -> None:
    doc = yaml.safe_load((REPO / "examples/dsv41-flash-1p1d-gb200.yaml").read_text())
    mutate(doc)
    doc["metadata"]["namespace"] = namespace
    message = next(r.message for r in SPEC_RULES if r.name == rule_name)
    server = crd_installed.kubectl(
        "apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(doc), check=False
    )
    assert server.returncode != 0, "API server accepted it"
    assert message in server.stderr and field in server.stderr, server.stderr


@pytest.mark.integration
@pytest.mark.parametrize(
    "example",
    [
        "dsv41-flash-gb200.yaml",
        "dsv41-flash-dspark.yaml",
        "dsv41-flash-1p1d-gb200.yaml",
        "dsv4-pro-3p2d-nvl72.yaml",
    ],
    ids=lambda e: f"{e} is accepted by the API server",
)
def test_examples_are_accepted_and_defaulted(
    crd_installed: ControlPlane, namespace: str, example: str
) -> None:
    doc = yaml.safe_load((REPO / "examples" / example).read_text())
    doc["metadata"]["namespace"] = namespace
    out = crd_installed.kubectl(
        "apply", "--dry-run=server", "-o", "yaml", "-f", "-", input=yaml.safe_dump(doc)
    )
    stored = yaml.safe_load(out.stdout)
    for role in stored["spec"].get("disaggregation", {}).get("roles", []):
        assert role["parallelism"]["pipelineParallelSize"] == 1  # defaulted in each role too
    assert stored["spec"]["parallelism"]["pipelineParallelSize"] == 1  # server-side default
    assert stored["spec"]["gpuResourceName"] == "nvidia.com/gpu"


@pytest.mark.integration
def test_case_and_dash_spelling_of_a_backend_is_accepted(
    crd_installed: ControlPlane, namespace: str
) -> None:
    doc = yaml.safe_load((REPO / "examples/dsv41-flash-gb200.yaml").read_text())
    doc["metadata"]["namespace"] = namespace
    doc["spec"]["moeBackend"] = "Deep-GEMM-Mega-MoE"
    crd_installed.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(doc))
