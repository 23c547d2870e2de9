"""GPUs claimed through DRA: the ResourceClaimTemplate, its CEL selectors, and the pod's claims."""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import pytest
import yaml

from deepseek_operator.api.load import parse_serving
from deepseek_operator.commands.render.inputs import load_cluster_file, load_nodes_file
from deepseek_operator.engine.placement import NodeRequirement, Requirement
from deepseek_operator.errors import SpecError
from deepseek_operator.nodes.facts import build_inventory
from deepseek_operator.plan import Observed, plan
from deepseek_operator.render.affinity import affinity_terms, node_matches
from deepseek_operator.render.claims import claim_selectors
from tests.dra_slices import dra_only_pool

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOW = "2026-01-01T00:00:00Z"
CC_RANGE = (
    '"cudaComputeCapability" in device.attributes["gpu.nvidia.com"] && '
    'device.attributes["gpu.nvidia.com"].cudaComputeCapability.compareTo(semver("10.0.0")) >= 0'
)


def _body(name: str = "dsv41-flash-gb200.yaml", **spec: Any) -> dict[str, Any]:
    body = yaml.safe_load((ROOT / "examples" / name).read_text())
    body["spec"].update(spec)
    return body


def _objects(body: dict[str, Any], nodes: list[Any], slices: list[Any]) -> list[dict[str, Any]]:
    planned = plan(parse_serving(body), build_inventory(nodes, slices), Observed.offline(), NOW)
    return planned.objects


def _dra_pool() -> tuple[list[Any], list[Any]]:
    return load_cluster_file(str(ROOT / "examples/nodes-gb200-dra.yaml"))


def _pod_specs(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for o in objects:
        if o["kind"] == "Deployment":
            out.append(o["spec"]["template"]["spec"])
        elif o["kind"] == "LeaderWorkerSet":
            template = o["spec"]["leaderWorkerTemplate"]
            out += [template["leaderTemplate"]["spec"], template["workerTemplate"]["spec"]]
    return out


def test_a_dra_only_pool_gets_a_claim_template_and_pods_that_claim_from_it() -> None:
    objects = _objects(_body(), *_dra_pool())
    assert [o["kind"] for o in objects] == ["ResourceClaimTemplate", "Deployment", "Service"]
    template = objects[0]
    assert template["apiVersion"] == "resource.k8s.io/v1"
    assert template["metadata"]["name"] == "dsv41-gpus"
    # Owned and labelled as every child, so it is listed, restored and deleted with them.
    owned = {k: v for k, v in objects[1]["metadata"].items() if k not in ("name", "labels")}
    assert {k: v for k, v in template["metadata"].items() if k not in ("name", "labels")} == owned
    assert template["metadata"]["labels"]["app.kubernetes.io/component"] == "gpus"
    devices = template["spec"]["spec"]["devices"]
    request = devices["requests"][0]["exactly"]
    assert (request["deviceClassName"], request["allocationMode"], request["count"]) == (
        "gpu.nvidia.com",
        "ExactCount",
        4,
    )
    expressions = [s["cel"]["expression"] for s in request["selectors"]]
    assert expressions[0].startswith(CC_RANGE) and 'semver("11.0.0")) < 0' in expressions[0]
    assert '"NVIDIA GB200"' in expressions[1] and '"NVIDIA H200"' not in expressions[1]
    assert 'memory.compareTo(quantity("146390Mi")) >= 0' in expressions[2]
    assert devices["constraints"] == [
        {"requests": ["gpus"], "matchAttribute": "gpu.nvidia.com/productName"}
    ]
    (pod,) = _pod_specs(objects)
    assert pod["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "dsv41-gpus"}]
    resources = pod["containers"][0]["resources"]
    assert resources["claims"] == [{"name": "gpus"}]
    assert "nvidia.com/gpu" not in resources["limits"] | resources["requests"]


def test_a_labelled_pool_keeps_the_device_plugin_limit() -> None:
    objects = _objects(_body(), load_nodes_file(str(ROOT / "examples/nodes-gb200.yaml")), [])
    assert "ResourceClaimTemplate" not in [o["kind"] for o in objects]
    (pod,) = _pod_specs(objects)
    assert "resourceClaims" not in pod
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"


OVERRIDES = {
    "devicePlugin on a DRA pool renders the limit as asked": ("devicePlugin", "dra", False),
    "dra on a labelled pool renders the claim as asked": ("dra", "labels", True),
    "auto on a DRA pool claims": ("auto", "dra", True),
    "auto on a labelled pool takes the limit": ("auto", "labels", False),
}


@pytest.mark.parametrize("mode, pool, claims", OVERRIDES.values(), ids=OVERRIDES.keys())
def test_spec_gpu_allocation_overrides_what_the_pool_suggests(
    mode: str, pool: str, claims: bool
) -> None:
    nodes = (
        _dra_pool()
        if pool == "dra"
        else (load_nodes_file(str(ROOT / "examples/nodes-gb200.yaml")), [])
    )
    objects = _objects(_body(gpuAllocation=mode), *nodes)
    assert ("ResourceClaimTemplate" in [o["kind"] for o in objects]) is claims
    (pod,) = _pod_specs(objects)
    assert ("nvidia.com/gpu" in pod["containers"][0]["resources"]["limits"]) is not claims


def test_an_unknown_gpu_allocation_is_refused_naming_field_and_value() -> None:
    with pytest.raises(SpecError) as caught:
        parse_serving(_body(gpuAllocation="mig"))
    line = caught.value.one_line()
    assert "spec.gpuAllocation" in line and '"mig"' in line and "dra" in line


def test_multi_node_groups_claim_gpus_beside_the_imex_channel() -> None:
    nodes = load_nodes_file(str(ROOT / "examples/nodes-gb200-two-racks.yaml"))
    twins, slices = dra_only_pool(copy.deepcopy(nodes))
    objects = _objects(_body("dsv41-flash-dep8-nvl72.yaml"), twins, slices)
    kinds = [o["kind"] for o in objects]
    assert kinds == ["ResourceClaimTemplate", "ComputeDomain", "LeaderWorkerSet", "Service"]
    for pod in _pod_specs(objects):
        assert [c["name"] for c in pod["resourceClaims"]] == ["gpus", "imex-channel"]
        assert pod["containers"][0]["resources"]["claims"] == [
            {"name": "gpus"},
            {"name": "imex-channel"},
        ]


SELECTORS = {
    "SM100 asks for compute capability 10.x": (Requirement.SM100, 0, 1),
    "CC >= 10 asks for no upper bound": (Requirement.CC_AT_LEAST_10, 0, 1),
    "MegaMoE adds the NVLink-tray products": (Requirement.MEGA_MOE, 0, 2),
    "any GPU with a memory minimum asks for memory only": (Requirement.ANY_GPU, 1000, 1),
    "any GPU without a minimum asks for nothing": (Requirement.ANY_GPU, 0, 0),
}


@pytest.mark.parametrize("kind, memory, count", SELECTORS.values(), ids=SELECTORS.keys())
def test_each_requirement_becomes_its_own_selectors(
    kind: Requirement, memory: int, count: int
) -> None:
    selectors = claim_selectors(NodeRequirement(kind, min_gpu_memory_mib=memory))
    assert len(selectors) == count
    if kind is Requirement.CC_AT_LEAST_10:
        assert selectors == [CC_RANGE]
    # Every expression tests that what it reads is published (else it fails the allocation).
    assert all(" in device." in s for s in selectors)


def test_dra_affinity_admits_dra_twins_and_still_refuses_a_measured_broken_mesh() -> None:
    nodes = load_nodes_file(str(ROOT / "examples/nodes-mixed.yaml"))
    twins, _ = dra_only_pool(copy.deepcopy(nodes))
    terms = affinity_terms(
        NodeRequirement(Requirement.MEGA_MOE, min_gpu_memory_mib=146390), dra=True
    )
    admitted = {
        t["metadata"]["name"] for t in twins if node_matches(t["metadata"]["labels"], terms)
    }
    # The H200 twins pass the affinity (their claim's CEL selectors refuse them); the tray whose
    # agent measured a broken mesh is refused by the affinity, as DRA cannot say otherwise.
    assert "gb200-tray-0" in admitted and "gb200-tray-1" not in admitted
