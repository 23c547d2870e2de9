"""spec.router: the API server (the generated CRD's schema and CEL rules) and the offline
``render`` give the same verdict, and the same words, on good and bad router sections."""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import pytest
import yaml

from deepseek_operator.api.load import parse_serving
from deepseek_operator.errors import SpecError
from tests.k8s.cluster import ControlPlane

REPO = pathlib.Path(__file__).resolve().parents[2]
SEED = yaml.safe_load((REPO / "examples/dsv41-flash-1p1d-gb200.yaml").read_text())
PEER_RULE = "set ipBlock alone, or podSelector and/or namespaceSelector"

# (id, router section, None when admitted else (field, words both sides must say))
CASES: list[tuple[str, dict[str, Any], tuple[str, str] | None]] = [
    ("router off", {"enabled": False}, None),
    ("every field", {"enabled": True, "replicas": 3, "policy": "power_of_two",
                     "image": "registry.example.com/r/router:0.1.17@sha256:" + "a" * 64,
                     "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                     "engineAccessFrom": [
                         {"podSelector": {"matchLabels": {"app": "gw"}},
                          "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]}},
                         {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}]}, None),
    ("a policy vllm-router lacks", {"policy": "least_loaded"}, ("spec.router.policy", "Unsupported value")),
    ("no router pod", {"replicas": 0}, ("spec.router.replicas", "greater than or equal to 1")),
    ("an image with a space", {"image": "my router:1"}, ("spec.router.image", "should match")),
    ("ipBlock beside a selector",
     {"engineAccessFrom": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]},
     ("spec.router.engineAccessFrom[0]", PEER_RULE)),
    ("an empty peer", {"engineAccessFrom": [{}]}, ("spec.router.engineAccessFrom[0]", PEER_RULE)),
    ("In without values",
     {"engineAccessFrom": [{"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}]},
     ("spec.router.engineAccessFrom[0].podSelector.matchExpressions[0].values", "set when it is In or NotIn")),
    ("a bad label key", {"engineAccessFrom": [{"podSelector": {"matchLabels": {"-a": "b"}}}]},
     ("spec.router.engineAccessFrom[0].podSelector.matchLabels", "every key must be")),
]  # fmt: skip


@pytest.mark.integration
@pytest.mark.parametrize(("router", "refusal"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_api_server_and_render_agree_on_spec_router(
    crds: ControlPlane, namespace: str, router: dict[str, Any], refusal: tuple[str, str] | None
) -> None:
    doc = copy.deepcopy(SEED)
    doc["metadata"]["namespace"] = namespace
    doc["spec"]["router"] = router
    server = crds.kubectl(
        "create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(doc), check=False
    )
    try:
        parse_serving(copy.deepcopy(doc))
        offline = None
    except SpecError as exc:
        offline = exc.one_line()
    if refusal is None:
        assert server.returncode == 0, server.stderr
        assert offline is None, offline
        return
    field, words = refusal
    assert server.returncode != 0, "the API server admitted it"
    assert field in server.stderr and words in server.stderr, server.stderr
    assert offline is not None and offline.startswith(field) and words in offline, offline
    assert "\n" not in offline
