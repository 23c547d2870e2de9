"""GPUs claimed through DRA: the ResourceClaimTemplate a serving pod takes its GPUs from (pure).

On a cluster whose GPUs NVIDIA's DRA driver hands out, a pod gets GPUs only through a
ResourceClaim. Every pod of a DeepSeekServing claims from one ResourceClaimTemplate: one request
of ``gpus_per_pod`` devices of the ``gpu.nvidia.com`` DeviceClass, whose CEL selectors state the
decision's node requirement on each device (SM100 compute capability, the per-GPU memory the
checkpoint needs, an NVLink-tray product where MegaMoE needs a full mesh the slices cannot show),
and a constraint that every device of the claim is the same product. A pod's claim is allocated
from the ResourceSlices of the node it is scheduled to, so its GPUs are on one node by
construction. NVLink facts measured by the agent stay node affinity (``render/affinity.py``).
"""

from __future__ import annotations

import json
from typing import Any

from deepseek_operator.catalog.gpus import GPU_PRODUCTS
from deepseek_operator.engine.placement import NodeRequirement, Requirement
from deepseek_operator.names import DRA_GPU_DRIVER
from deepseek_operator.nodes.claims import GPU_POD_CLAIM
from deepseek_operator.nodes.dra_device import ATTR_CC, ATTR_PRODUCT, CAPACITY_MEMORY

CLAIM_NAME = GPU_POD_CLAIM
"""The pod's resource-claim name (and the template's request name) for its GPUs."""

_ATTRS = f"device.attributes[{json.dumps(DRA_GPU_DRIVER)}]"
_CAPACITY = f"device.capacity[{json.dumps(DRA_GPU_DRIVER)}]"


def _version_at_least(major: int) -> str:
    return f'{_ATTRS}.{ATTR_CC}.compareTo(semver("{major}.0.0")) >= 0'


def _version_below(major: int) -> str:
    return f'{_ATTRS}.{ATTR_CC}.compareTo(semver("{major}.0.0")) < 0'


def _nvlink_products() -> list[str]:
    """NVML names of the SM100 products whose node is a full NVLink mesh by construction."""
    return [
        p.gfd.replace("-", " ")
        for p in GPU_PRODUCTS
        if p.gfd and p.nvlink_fully_connected_by_product and p.cc[0] == 10
    ]


def claim_selectors(requirement: NodeRequirement) -> list[str]:
    """The CEL expressions each claimed device must satisfy, one per rule, in a stable order.

    Each one first tests that the attribute is published, so a malformed device is simply not
    selected (an expression that fails at run time would fail the whole allocation).
    """
    selectors: list[str] = []
    kind = requirement.kind
    if kind in (Requirement.SM100, Requirement.MEGA_MOE):
        selectors.append(
            f'"{ATTR_CC}" in {_ATTRS} && {_version_at_least(10)} && {_version_below(11)}'
        )
    elif kind is Requirement.CC_AT_LEAST_10:
        selectors.append(f'"{ATTR_CC}" in {_ATTRS} && {_version_at_least(10)}')
    if kind is Requirement.MEGA_MOE:
        products = json.dumps(_nvlink_products())
        selectors.append(f'"{ATTR_PRODUCT}" in {_ATTRS} && {_ATTRS}.{ATTR_PRODUCT} in {products}')
    if requirement.min_gpu_memory_mib:
        minimum = f'quantity("{requirement.min_gpu_memory_mib}Mi")'
        selectors.append(
            f'"{CAPACITY_MEMORY}" in {_CAPACITY} && '
            f"{_CAPACITY}.{CAPACITY_MEMORY}.compareTo({minimum}) >= 0"
        )
    return selectors


def claim_template_spec(requirement: NodeRequirement, gpus_per_pod: int) -> dict[str, Any]:
    """The ``spec`` of the ResourceClaimTemplate (the ResourceClaim spec each pod gets)."""
    request: dict[str, Any] = {
        "deviceClassName": DRA_GPU_DRIVER,
        "allocationMode": "ExactCount",
        "count": gpus_per_pod,
    }
    selectors = claim_selectors(requirement)
    if selectors:
        request["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {
        "spec": {
            "devices": {
                "requests": [{"name": CLAIM_NAME, "exactly": request}],
                # One product per pod: an EP group of mixed GPUs runs at the slowest one's pace,
                # and the decision called a node of mixed devices ineligible.
                "constraints": [
                    {
                        "requests": [CLAIM_NAME],
                        "matchAttribute": f"{DRA_GPU_DRIVER}/{ATTR_PRODUCT}",
                    }
                ],
            }
        }
    }
