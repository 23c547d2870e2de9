"""The ONE GPU Node builder and the ONE healthy-GB200 agent label set, for tests, bench and demo.

Unit tests build bare Nodes (``kwok=False, gfd_memory=False``) to feed the decision; the
control-plane tests, the operator benchmark and ``make demo`` build kwok-managed Nodes with the
full GPU Feature Discovery label set. Agent label keys may be given without the
``gpu.deepseek-operator.io/`` prefix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from deepseek_operator import names

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"

#: product → (compute capability, GPUs per node, ``nvidia.com/gpu.memory`` MiB as GFD reports it)
GPU_PRODUCTS: dict[str, tuple[tuple[int, int], int, int]] = {
    "NVIDIA-GB200": ((10, 0), 4, 189471),
    "NVIDIA-B200": ((10, 0), 8, 183359),
    "NVIDIA-B300-SXM6-AC": ((10, 3), 8, 275040),
    "NVIDIA-GB300": ((10, 3), 4, 284208),
    "NVIDIA-H200": ((9, 0), 8, 143771),
    "NVIDIA-H100-80GB-HBM3": ((9, 0), 8, 81559),
    "NVIDIA-H100-PCIe": ((9, 0), 4, 81559),
    "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition": ((12, 0), 8, 97887),
    "NVIDIA-A100-SXM4-80GB": ((8, 0), 8, 81920),
    "NVIDIA-L40S": ((8, 9), 8, 46068),
}


def agent_labels(product: str = "NVIDIA-GB200", fully_connected: str = "true") -> dict[str, str]:
    """The node agent's labels (keys without prefix) for a node of ``product``."""
    cc, count, _ = GPU_PRODUCTS[product]
    return {
        "present": "true",
        "product": product,
        "count": str(count),
        "cc": f"{cc[0]}.{cc[1]}",
        "sm-family": f"sm{cc[0] * 10}",
        "nvlink.fully-connected": fully_connected,
        "nvlink.domain-size": str(count if fully_connected == "true" else count - 1),
    }


#: Agent labels of a healthy GB200 tray (SM100, all four GPUs pairwise NVLink-connected).
HEALTHY_GB200_AGENT_LABELS: dict[str, str] = agent_labels("NVIDIA-GB200")


def gpu_family(cc: tuple[int, int]) -> str:
    """GFD's ``nvidia.com/gpu.family`` for a compute capability (10.x and 12.x: blackwell)."""
    major, minor = cc
    if major == 8 and minor == 9:
        return "ada-lovelace"
    return {
        7: "volta" if minor == 0 else "turing",
        8: "ampere",
        9: "hopper",
        10: "blackwell",
        12: "blackwell",
        13: "rubin",
    }.get(major, "undefined")


def make_gpu_node(
    name: str,
    product: str = "NVIDIA-GB200",
    count: int | None = None,
    cc: tuple[int, int] | None = None,
    agent_labels: Mapping[str, str] | None = None,
    extra_labels: Mapping[str, str] | None = None,
    allocatable_gpus: int | None = None,
    *,
    gfd_cc: bool = True,
    gfd_memory: bool = True,
    memory_mib: int | None = None,
    kwok: bool = True,
    cpu: str = "128",
    memory: str = "1Ti",
    pods: str = "110",
    taints: Sequence[Mapping[str, str]] = (),
    annotations: Mapping[str, str] | None = None,
    unschedulable: bool = False,
    ready: bool | None = None,
) -> dict[str, Any]:
    """A GPU Node object (a dict) with GPU Feature Discovery labels for ``product``.

    Labels: ``nvidia.com/gpu.{present,product,count,family}``, ``compute.{major,minor}`` unless
    ``gfd_cc`` is False, ``memory`` unless ``gfd_memory`` is False, ``kubernetes.io/{hostname,
    os,arch}`` (arm64 for Grace ``GB*`` products), ``type=kwok`` and the kwok annotation when
    ``kwok``. ``count`` and ``cc`` default to the product's. ``status.allocatable`` has
    ``allocatable_gpus`` (default ``count``) GPUs; ``ready`` adds a Ready condition (kwok sets
    its own). Create a kwok Node with ``ControlPlane.create_node``.
    """
    known_cc, known_count, known_memory = GPU_PRODUCTS.get(product, ((10, 0), 4, 81920))
    cc = cc if cc is not None else known_cc
    count = count if count is not None else known_count
    labels: dict[str, str] = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "arm64" if product.startswith("NVIDIA-GB") else "amd64",
        names.GFD_PRESENT: "true",
        names.GFD_PRODUCT: product,
        names.GFD_COUNT: str(count),
        names.GFD_FAMILY: gpu_family(cc),
    }
    if kwok:
        labels["type"] = "kwok"
    if gfd_cc:
        labels[names.GFD_CC_MAJOR] = str(cc[0])
        labels[names.GFD_CC_MINOR] = str(cc[1])
    if gfd_memory:
        labels[names.GFD_MEMORY] = str(memory_mib if memory_mib is not None else known_memory)
    for key, value in (agent_labels or {}).items():
        prefixed = key if key.startswith(names.AGENT_PREFIX) else names.AGENT_PREFIX + key
        labels[prefixed] = str(value)
    labels.update({k: str(v) for k, v in (extra_labels or {}).items()})
    node_annotations = {**({KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE} if kwok else {})}
    node_annotations.update(annotations or {})
    alloc = count if allocatable_gpus is None else allocatable_gpus
    resources = {"cpu": cpu, "memory": memory, "pods": pods, "ephemeral-storage": "1Ti"}
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    status: dict[str, Any] = {
        "nodeInfo": {"architecture": labels["kubernetes.io/arch"], "operatingSystem": "linux"},
        "capacity": {**resources, "nvidia.com/gpu": str(count)},
        "allocatable": {**resources, "nvidia.com/gpu": str(alloc)},
    }
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if node_annotations:
        metadata["annotations"] = node_annotations
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }


def gb200_tray(name: str, pool: str) -> dict[str, Any]:
    """One healthy kwok GB200 tray (4 GPUs, node agent labels) labelled ``pool=<pool>``: the node
    most control-plane tests give their DeepSeekServing."""
    return make_gpu_node(
        name, "NVIDIA-GB200", 4, (10, 0), agent_labels=HEALTHY_GB200_AGENT_LABELS,
        extra_labels={"pool": pool},
    )  # fmt: skip
