"""The router's objects and the engines' NetworkPolicies, as plan() renders them, are accepted by
a real API server (server-side dry run: its own validation of Deployments, Services, RBAC and
NetworkPolicies, endPort ranges included), and a restricted-level namespace admits the router
pod (Pod Security admission runs on the Deployment's template at dry run as a warning)."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from deepseek_operator.api.load import parse_serving
from deepseek_operator.nodes.facts import build_inventory
from deepseek_operator.plan import Observed, plan
from tests.k8s.cluster import ControlPlane

REPO = pathlib.Path(__file__).resolve().parents[2]
CASES = {
    "1P1D": ("dsv41-flash-1p1d-gb200.yaml", "nodes-gb200.yaml"),
    "3P2D multi-pod": ("dsv4-pro-3p2d-nvl72.yaml", "nodes-gb200-nvl72.yaml"),
}
KINDS = ("ServiceAccount", "Role", "RoleBinding", "NetworkPolicy", "Service")


@pytest.mark.integration
@pytest.mark.parametrize("case", list(CASES))
def test_the_router_objects_are_accepted_by_the_api_server(
    control_plane: ControlPlane, namespace: str, case: str
) -> None:
    example, nodes = CASES[case]
    raw = yaml.safe_load((REPO / "examples" / example).read_text())
    raw["metadata"]["namespace"] = namespace
    items = yaml.safe_load((REPO / "examples" / nodes).read_text())["items"]
    planned = plan(
        parse_serving(raw), build_inventory(items), Observed.offline(), "2026-12-06T00:00:00Z"
    )
    router = [
        o
        for o in planned.objects
        if o["kind"] in KINDS
        or o["metadata"]["labels"].get("app.kubernetes.io/component") == "router"
    ]
    assert {o["kind"] for o in router} >= {*KINDS, "Deployment"}
    control_plane.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/warn=restricted",
    )  # fmt: skip
    out = control_plane.kubectl(
        "apply", "--server-side", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(router)
    )
    assert "would violate PodSecurity" not in out.stderr, out.stderr
    # The check is real: an endPort below its port is refused by the API server.
    policy = next(o for o in router if o["kind"] == "NetworkPolicy")
    broken = yaml.safe_load(yaml.safe_dump(policy))
    broken["spec"]["ingress"][0]["ports"][0]["endPort"] = 1
    refused = control_plane.kubectl(
        "apply", "--server-side", "--dry-run=server", "-f", "-", input=yaml.safe_dump(broken),
        check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "endPort" in refused.stderr, refused.stderr
