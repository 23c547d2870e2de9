"""What a node's DRA GPUs are: :class:`DraGpus`, the product, compute capability and memory its
well-formed ``gpu.nvidia.com`` devices share and how many of them claims leave free, and
:class:`DraInventory`, every node's (nodes/dra.py reads them from the ResourceSlices).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from deepseek_operator import names
from deepseek_operator.catalog.gpus import sm_family
from deepseek_operator.nodes.claims import ClaimOwner, HeldDevice
from deepseek_operator.nodes.dra_device import (
    ATTR_ARCHITECTURE,
    ATTR_CC,
    CAPACITY_MEMORY,
    DraGpu,
    capacity_name,
    gfd_style_product,
    parse_quantity_bytes,
)

MIXED = "mixed"


@dataclass(frozen=True, slots=True)
class DraGpus:
    """What a node's ``gpu.nvidia.com`` ResourceSlices say about its GPUs."""

    pools: tuple[str, ...]
    devices: tuple[DraGpu, ...]  # well-formed whole GPUs only: the count the decision uses
    problems: tuple[str, ...] = ()  # malformed slices and devices of this node, one line each
    held: tuple[HeldDevice, ...] = ()  # claims' allocations of these devices

    @property
    def count(self) -> int:
        """Whole GPUs the node publishes (malformed devices excluded)."""
        return len(self.devices)

    def held_by_others(self, owner: ClaimOwner | None) -> int:
        """Devices that claims other than ``owner``'s pods' leave no room on for one of its pods,
        each device once, as the scheduler counts them: an exclusive device is taken by any
        allocation; a shared one (consumable capacity) once what the others consume plus what
        a whole-GPU claim consumes exceeds one of its capacities."""
        shares = {(d.pool, d.name): d.shares for d in self.devices}
        taken: set[tuple[str, str]] = set()
        used: dict[tuple[str, str], dict[str, int]] = {}
        for h in self.held:
            if owner is not None and owner.owns(h):
                continue
            key = (h.pool, h.device)
            amounts = [(capacity_name(n), parse_quantity_bytes(q)) for n, q in h.consumed]
            if not shares.get(key) or not amounts or any(a is None for _, a in amounts):
                taken.add(key)  # a whole device, or a share we cannot read: held whole
                continue
            per = used.setdefault(key, {})
            for name, amount in amounts:
                per[name] = per.get(name, 0) + (amount or 0)
        for key, per in used.items():
            if any(per.get(name, 0) + need > value for name, value, need in shares[key]):
                taken.add(key)
        return len(taken)

    def free(self, owner: ClaimOwner | None) -> int:
        """Devices no claim holds, plus those held by ``owner``'s own pods."""
        return self.count - self.held_by_others(owner)

    @property
    def product(self) -> str | None:
        """GFD-style product (``NVIDIA-H200``) all devices share, ``mixed``, or None."""
        return _common([gfd_style_product(d.product) for d in self.devices])

    @property
    def architecture(self) -> str | None:
        """The driver's ``architecture`` all devices share (``Hopper``), ``mixed``, or None."""
        return _common([d.architecture for d in self.devices])

    @property
    def compute(self) -> tuple[str, tuple[int, int] | None] | None:
        """(sm family, compute capability) of the devices; ``("mixed", None)`` when they differ."""
        if not self.devices:
            return None
        ccs = {d.cc for d in self.devices}
        if len(ccs) == 1:
            cc = next(iter(ccs))
            return sm_family(cc[0]), cc
        families = {sm_family(cc[0]) for cc in ccs}
        return (families.pop() if len(families) == 1 else MIXED), None

    @property
    def memory_mib(self) -> int | None:
        """The smallest device memory in MiB (a pod may get any device), or None."""
        return min((d.memory_mib for d in self.devices), default=None)

    def evidence(self, attribute: str) -> str:
        """``gpu.nvidia.com ResourceSlice cudaComputeCapability='10.0.0' (DRA)``: the published
        values a fact rests on, as messages quote them. No pool or node name, so nodes that
        publish the same values group into one line of a message."""
        where = f"{names.DRA_GPU_DRIVER} ResourceSlice"
        if not self.devices:
            return f"{where}: no well-formed GPU device (DRA)"
        values = sorted({_attribute_text(d, attribute) for d in self.devices})
        return f"{where} {attribute}=" + " / ".join(repr(v) for v in values) + " (DRA)"


@dataclass(frozen=True, slots=True)
class DraInventory:
    """Every node's DRA GPU facts, and the slices that belong to no node we know."""

    by_node: Mapping[str, DraGpus]
    problems: tuple[tuple[str, str], ...] = ()  # (slice name, what is wrong) not tied to a node


def _attribute_text(device: DraGpu, attribute: str) -> str:
    if attribute == ATTR_CC:
        return device.cc_text
    if attribute == CAPACITY_MEMORY:
        return f"{device.memory_mib}Mi"
    if attribute == ATTR_ARCHITECTURE:
        return device.architecture
    return device.product


def _common(values: Sequence[str]) -> str | None:
    if not values:
        return None
    return values[0] if len(set(values)) == 1 else MIXED
