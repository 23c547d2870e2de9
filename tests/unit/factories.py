"""Builders for specs and Node objects used across the unit tests."""

from __future__ import annotations

from typing import Any

from deepseek_operator.api.load import parse_spec
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.nodes.facts import NodeInventory, build_inventory

AGENT = "gpu.deepseek-operator.io/"

PRODUCTS: dict[str, tuple[tuple[int, int], int]] = {
    "NVIDIA-GB200": ((10, 0), 4),
    "NVIDIA-B200": ((10, 0), 8),
    "NVIDIA-B300-SXM6-AC": ((10, 3), 8),
    "NVIDIA-GB300": ((10, 3), 4),
    "NVIDIA-H200": ((9, 0), 8),
    "NVIDIA-H100-80GB-HBM3": ((9, 0), 8),
    "NVIDIA-H100-PCIe": ((9, 0), 4),
    "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition": ((12, 0), 8),
}


def spec(**overrides: Any) -> DeepSeekServingSpec:
    """The seed spec (V4.1-Flash, TP4, EP, auto) with camelCase overrides merged one level deep."""
    raw: dict[str, Any] = {
        "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash"},
        "image": "vllm/vllm-openai:deepseekv41-flash-0909",
        "moeBackend": "auto",
        "parallelism": {"tensorParallelSize": 4, "expertParallel": True},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    return parse_spec(raw)


def node(
    name: str,
    product: str = "NVIDIA-GB200",
    *,
    gfd_cc: bool = True,
    agent: dict[str, str] | None = None,
    allocatable: int | None = None,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    ready: bool = True,
) -> dict[str, Any]:
    """A Node object with GFD labels for ``product`` and optional agent labels."""
    cc, count = PRODUCTS[product]
    node_labels = {
        "kubernetes.io/hostname": name,
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(count),
    }
    if gfd_cc:
        node_labels["nvidia.com/gpu.compute.major"] = str(cc[0])
        node_labels["nvidia.com/gpu.compute.minor"] = str(cc[1])
    if agent is not None:
        node_labels.update({AGENT + k: v for k, v in agent.items()})
    node_labels.update(labels or {})
    gpus = count if allocatable is None else allocatable
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def agent_labels(product: str = "NVIDIA-GB200", fully_connected: str = "true") -> dict[str, str]:
    """Agent labels as the node agent publishes them."""
    cc, count = PRODUCTS[product]
    return {
        "present": "true",
        "product": product,
        "count": str(count),
        "cc": f"{cc[0]}.{cc[1]}",
        "sm-family": f"sm{cc[0] * 10}",
        "nvlink.fully-connected": fully_connected,
        "nvlink.domain-size": str(count if fully_connected == "true" else count - 1),
    }


def inventory(*nodes: dict[str, Any]) -> NodeInventory:
    """Inventory of ``nodes``."""
    return build_inventory(nodes)


def gb200_pool(n: int = 4) -> NodeInventory:
    """``n`` healthy GB200 trays with agent labels."""
    return inventory(*(node(f"gb200-{i}", agent=agent_labels()) for i in range(n)))
