"""GPU products: compute capability and whether the product implies an all-NVLink node.

Source: docs/node-facts.md (NVIDIA's CUDA compute-capability table; GFD product strings seen in
public label sets). NVLink may be inferred ONLY for NVSwitch / NVL-tray parts (docs/design.md); a
PCIe or NVL-bridge part is never assumed to be fully connected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuProduct:
    """Facts about one GPU product."""

    pattern: str  # regex on the GFD product label (sanitised NVML name), for display
    cc: tuple[int, int]
    nvlink_fully_connected_by_product: bool
    display: str
    # The exact GFD `nvidia.com/gpu.product` string the decision may rely on. Exact, because
    # node affinity cannot match a regex; None for parts the decision never infers from.
    gfd: str | None = None


GPU_PRODUCTS: tuple[GpuProduct, ...] = (
    # CC 10.0: GB200 tray (NVL4/NVL72 compute tray, 4 GPUs, NV18 all-to-all) and HGX B200 (NVSwitch).
    GpuProduct(r"^NVIDIA-GB200(\b|-|$)", (10, 0), True, "GB200", "NVIDIA-GB200"),
    GpuProduct(r"^NVIDIA-B200(\b|-|$)", (10, 0), True, "B200", "NVIDIA-B200"),
    # CC 10.3: HGX B300 (NVSwitch) and GB300 tray. The "-WS" workstation variant is not a tray.
    GpuProduct(r"^NVIDIA-GB300-WS", (10, 3), False, "GB300 workstation"),
    GpuProduct(r"^NVIDIA-GB300(\b|-|$)", (10, 3), True, "GB300", "NVIDIA-GB300"),
    GpuProduct(r"^NVIDIA-B300", (10, 3), True, "B300", "NVIDIA-B300-SXM6-AC"),
    # CC 9.0. SXM HGX boards have NVSwitch; PCIe and NVL (bridge) parts do not imply a full mesh.
    GpuProduct(r"^NVIDIA-H100-PCIe", (9, 0), False, "H100 PCIe"),
    GpuProduct(r"^NVIDIA-H100-NVL", (9, 0), False, "H100 NVL"),
    GpuProduct(r"^NVIDIA-H100-80GB-HBM3", (9, 0), True, "H100 SXM", "NVIDIA-H100-80GB-HBM3"),
    GpuProduct(r"^NVIDIA-H200-NVL", (9, 0), False, "H200 NVL"),
    GpuProduct(r"^NVIDIA-H200(\b|-SXM|$)", (9, 0), True, "H200 SXM", "NVIDIA-H200"),
    GpuProduct(r"^NVIDIA-H20$", (9, 0), True, "H20", "NVIDIA-H20"),
    GpuProduct(r"^NVIDIA-H800", (9, 0), True, "H800", "NVIDIA-H800"),
    GpuProduct(r"^NVIDIA-GH200", (9, 0), False, "GH200"),
    # Blackwell family parts that are NOT SM100 (CC 12.x).
    GpuProduct(r"^NVIDIA-RTX-PRO-6000-Blackwell", (12, 0), False, "RTX PRO 6000 Blackwell"),
    GpuProduct(r"^NVIDIA-GB10$", (12, 1), False, "GB10"),
    GpuProduct(r"^NVIDIA-GeForce-RTX-50", (12, 0), False, "RTX 50xx"),
    # Older parts, for clear messages.
    GpuProduct(r"^(NVIDIA-)?A100-SXM4", (8, 0), True, "A100 SXM4"),
    GpuProduct(r"^(NVIDIA-)?A100-PCIE", (8, 0), False, "A100 PCIe"),
    GpuProduct(r"^NVIDIA-L40S?$", (8, 9), False, "L40/L40S"),
    GpuProduct(r"^NVIDIA-L4$", (8, 9), False, "L4"),
    GpuProduct(r"^Tesla-V100-SXM2", (7, 0), False, "V100 SXM2"),
)

# Exact GFD product string -> compute capability, for nodes without any CC label (very old GFD).
EXACT_PRODUCT_CC: dict[str, tuple[int, int]] = {p.gfd: p.cc for p in GPU_PRODUCTS if p.gfd}
# Exact GFD product strings of NVSwitch boards and NVL trays: every GPU pair is NVLink-connected
# on a healthy node, so NVLink may be inferred for them (docs/design.md).
INFERRED_NVLINK_PRODUCTS: tuple[str, ...] = tuple(
    p.gfd for p in GPU_PRODUCTS if p.gfd and p.nvlink_fully_connected_by_product
)

_COMPILED = tuple((re.compile(p.pattern), p) for p in GPU_PRODUCTS)


def find_product(label: str) -> GpuProduct | None:
    """Match a GFD ``nvidia.com/gpu.product`` value (suffixes like -SHARED are tolerated)."""
    for regex, product in _COMPILED:
        if regex.search(label):
            return product
    return None


def sm_family(cc_major: int) -> str:
    """``sm100`` for CC 10.x, ``sm90`` for 9.x: vLLM's ``is_device_capability_family`` grouping."""
    return f"sm{cc_major * 10}"
