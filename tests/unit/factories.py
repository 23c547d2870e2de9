"""Builders for specs, Nodes and inventories used across the unit tests.

Nodes come from the one shared builder in ``tests/gpu_nodes.py``; ``agent_labels`` is re-exported
from there for the unit tests' convenience.
"""

from __future__ import annotations

from typing import Any

from deepseek_operator.api.load import parse_spec
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.nodes.facts import NodeInventory, build_inventory
from tests.gpu_nodes import agent_labels, make_gpu_node


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
    """A bare GPU Node (the shared builder, without memory labels or kwok) for the decision."""
    return make_gpu_node(
        name,
        product,
        agent_labels=agent,
        extra_labels=labels,
        allocatable_gpus=allocatable,
        gfd_cc=gfd_cc,
        gfd_memory=False,
        kwok=False,
        taints=taints or (),
        unschedulable=unschedulable,
        ready=ready,
    )


def inventory(*nodes: dict[str, Any]) -> NodeInventory:
    """Inventory of ``nodes``."""
    return build_inventory(nodes)


def gb200_pool(n: int = 4) -> NodeInventory:
    """``n`` healthy GB200 trays with agent labels."""
    return inventory(*(node(f"gb200-{i}", agent=agent_labels()) for i in range(n)))


__all__ = ["agent_labels", "gb200_pool", "inventory", "node", "spec"]
