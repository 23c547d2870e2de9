"""The InferencePool a disaggregated serving renders is valid against the real CRD
(Gateway API Inference Extension v1.0.0, tests/fixtures/crds) in a real API server."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from deepseek_operator.api.load import parse_serving
from deepseek_operator.nodes.facts import build_inventory
from deepseek_operator.plan import Observed, plan
from tests.k8s.cluster import ControlPlane

REPO = pathlib.Path(__file__).resolve().parents[2]
CRD = REPO / "tests/fixtures/crds/inference.networking.k8s.io_inferencepools.yaml"


@pytest.mark.integration
def test_the_rendered_inference_pool_is_accepted_by_its_crd(
    control_plane: ControlPlane, namespace: str
) -> None:
    control_plane.kubectl("apply", "--server-side", "-f", str(CRD))
    control_plane.wait_crd_established("inferencepools.inference.networking.k8s.io")
    raw = yaml.safe_load((REPO / "examples/dsv4-pro-3p2d-nvl72.yaml").read_text())
    raw["metadata"]["namespace"] = namespace
    nodes = yaml.safe_load((REPO / "examples/nodes-gb200-nvl72.yaml").read_text())["items"]
    planned = plan(
        parse_serving(raw), build_inventory(nodes), Observed.offline(), "2026-12-04T00:00:00Z"
    )
    pool = next(o for o in planned.objects if o["kind"] == "InferencePool")
    out = control_plane.kubectl(
        "apply", "--dry-run=server", "-o", "yaml", "-f", "-", input=yaml.safe_dump(pool)
    )
    stored = yaml.safe_load(out.stdout)
    assert stored["spec"]["endpointPickerRef"]["name"] == "llm-d-epp"
    # A pool without the endpoint picker's port is refused by the CRD's own rule: the check is real.
    broken = yaml.safe_load(yaml.safe_dump(pool))
    del broken["spec"]["endpointPickerRef"]["port"]
    refused = control_plane.kubectl(
        "apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(broken), check=False
    )
    assert refused.returncode != 0 and "port is required" in refused.stderr, refused.stderr
