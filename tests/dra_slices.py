"""NVIDIA-shaped ResourceSlices (``resource.k8s.io/v1``) for tests, and DRA-only twins of nodes.

A slice is what NVIDIA's DRA driver (``gpu.nvidia.com``, ``cmd/gpu-kubelet-plugin``) publishes:
one pool per node named after it, one device ``gpu-<minor>`` per whole GPU, the attributes under
their short names with one typed value each (``{string: ...}``, ``{version: ...}``) and the
capacity ``memory`` as a binary-SI quantity of bytes (``143771Mi``).

:func:`dra_only` turns a label-described Node into the same node on a DRA cluster: no
``nvidia.com/gpu`` allocatable, no GFD or agent GPU labels (the agent's NVLink and fabric labels
stay: DRA publishes no NVLink relation), and a slice stating the same GPUs.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from deepseek_operator import names
from deepseek_operator.catalog.gpu_memory import PRODUCT_MEMORY_MIB
from deepseek_operator.catalog.gpus import find_product

DRIVER = names.DRA_GPU_DRIVER
# The driver's architecture string per compute-capability major (NVML's architecture names).
ARCHITECTURE = {7: "Volta", 8: "Ampere", 9: "Hopper", 10: "Blackwell", 12: "Blackwell"}
# Labels that state GPU facts DRA also states: a DRA-only twin has none of them.
_GPU_FACT_LABELS = (
    "nvidia.com/gpu.",
    "nvidia.com/cuda.",
    "nvidia.com/mig.",
    "nvidia.com/gfd.",
    names.AGENT_PRESENT,
    names.AGENT_PRODUCT,
    names.AGENT_COUNT,
    names.AGENT_CC,
    names.AGENT_SM_FAMILY,
    names.AGENT_MEMORY_MIB,
    names.AGENT_DRIVER,
    names.AGENT_CUDA,
    names.AGENT_MIG,
)


def gpu_device(
    minor: int,
    product: str = "NVIDIA GB200",
    cc: str = "10.0.0",
    memory: str = "189471Mi",
    architecture: str | None = None,
) -> dict[str, Any]:
    """One whole-GPU device as the driver publishes it."""
    major = int(cc.split(".")[0])
    return {
        "name": f"gpu-{minor}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-{minor:08d}-0000-4000-8000-000000000000"},
            "productName": {"string": product},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": architecture or ARCHITECTURE.get(major, "Unknown")},
            "cudaComputeCapability": {"version": cc},
            "driverVersion": {"version": "580.95.5"},
            "cudaDriverVersion": {"version": "13.0.0"},
            "resource.kubernetes.io/pciBusID": {"string": f"0000:{minor + 0x18:02x}:00.0"},
        },
        "capacity": {"memory": {"value": memory}},
    }


def gpu_slice(
    node: str,
    devices: list[dict[str, Any]] | None = None,
    *,
    count: int = 4,
    pool: str | None = None,
    generation: int = 1,
    slice_count: int = 1,
    name: str | None = None,
    **device: Any,
) -> dict[str, Any]:
    """A ``gpu.nvidia.com`` ResourceSlice for ``node`` (``count`` devices unless given)."""
    return {
        "apiVersion": names.DRA_API_VERSION,
        "kind": names.RESOURCE_SLICE_KIND,
        "metadata": {"name": name or f"{node}-{DRIVER}-{generation}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {
                "name": pool or node,
                "generation": generation,
                "resourceSliceCount": slice_count,
            },
            "devices": devices
            if devices is not None
            else [gpu_device(i, **device) for i in range(count)],
        },
    }


def _nvml_name(product: str) -> str:
    """``NVIDIA-H100-80GB-HBM3`` → ``NVIDIA H100 80GB HBM3`` (GFD joined the NVML words)."""
    return product.replace("-", " ")


def dra_only(node: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The same node on a DRA-only cluster, and the slice its driver would publish (None for a
    node without GPUs)."""
    twin = copy.deepcopy(dict(node))
    labels: dict[str, str] = twin["metadata"].get("labels") or {}
    product = labels.get(names.AGENT_PRODUCT) or labels.get(names.GFD_PRODUCT)
    status = twin.get("status") or {}
    count = int(str((status.get("allocatable") or {}).get("nvidia.com/gpu", "0")))
    for key in ("allocatable", "capacity"):
        if key in status:
            status[key] = {k: v for k, v in status[key].items() if k != "nvidia.com/gpu"}
    memory = labels.get(names.AGENT_MEMORY_MIB) or labels.get(names.GFD_MEMORY)
    if memory is None and product in PRODUCT_MEMORY_MIB:
        memory = str(PRODUCT_MEMORY_MIB[product])  # the driver always publishes a size
    cc = labels.get(names.AGENT_CC) or (
        f"{labels[names.GFD_CC_MAJOR]}.{labels.get(names.GFD_CC_MINOR, '0')}"
        if names.GFD_CC_MAJOR in labels
        else None
    )
    if cc is None and product and (known := find_product(product)) is not None:
        cc = f"{known.cc[0]}.{known.cc[1]}"
    twin["metadata"]["labels"] = {
        k: v
        for k, v in labels.items()
        if k == names.GFD_CLIQUE or not k.startswith(_GPU_FACT_LABELS)
    }
    if not product or not count or cc is None or memory is None:
        return twin, None
    name = twin["metadata"]["name"]
    device = {"product": _nvml_name(product), "cc": f"{cc}.0", "memory": f"{memory}Mi"}
    return twin, gpu_slice(name, count=count, **device)


def dra_only_pool(
    nodes: list[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """:func:`dra_only` over a pool: the twin Nodes and their slices."""
    twins, slices = [], []
    for node in nodes:
        twin, gpu = dra_only(node)
        twins.append(twin)
        if gpu is not None:
            slices.append(gpu)
    return twins, slices


def gpu_device_class() -> dict[str, Any]:
    """The driver's ``gpu.nvidia.com`` DeviceClass: whole GPUs of its driver (as its chart has it)."""
    attrs = f"device.attributes['{DRIVER}']"
    return {
        "apiVersion": names.DRA_API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {
            "selectors": [
                {"cel": {"expression": f"device.driver == '{DRIVER}' && {attrs}.type == 'gpu'"}}
            ]
        },
    }


def owned_by(slice_: dict[str, Any], node: Mapping[str, Any]) -> dict[str, Any]:
    """``slice_`` owned by the Node as the API returned it (the plugin's slices go with it)."""
    meta = node["metadata"]
    owner = {"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta["uid"]}
    slice_["metadata"]["ownerReferences"] = [owner]
    return slice_


def gpu_claim(
    name: str,
    pool: str,
    devices: list[str],
    *,
    namespace: str = "llm",
    pod: str | None = None,
    pod_claim: str = "gpus",
) -> dict[str, Any]:
    """A ResourceClaim whose allocation holds ``devices`` of ``pool`` (owned by ``pod`` when
    given, and annotated with the pod's claim entry ``pod_claim``, as the ResourceClaim
    controller makes a pod's claim from its template)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if pod is not None:
        meta["annotations"] = {"resource.kubernetes.io/pod-claim-name": pod_claim}
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod,
                "uid": f"uid-{pod}",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {
        "apiVersion": names.DRA_API_VERSION,
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {
                            "deviceClassName": DRIVER,
                            "allocationMode": "ExactCount",
                            "count": len(devices),
                        },
                    }
                ]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpus", "driver": DRIVER, "pool": pool, "device": d}
                        for d in devices
                    ]
                }
            }
        },
    }
