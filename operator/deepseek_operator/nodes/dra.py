"""ResourceSlices (``resource.k8s.io/v1``) of NVIDIA's ``gpu.nvidia.com`` driver → per-node GPU facts.

On a cluster whose GPUs the DRA driver manages, a node may have no ``nvidia.com/gpu`` allocatable
and no GPU Feature Discovery labels: its GPUs are the devices of its ResourceSlices. The driver
publishes one pool per node, each whole GPU a device ``gpu-<minor>`` with the typed attributes
``type`` (string ``gpu``), ``productName`` and ``architecture`` (strings),
``cudaComputeCapability`` (a semver version, ``10.0.0``) and the capacity ``memory`` (a
quantity of bytes). Attribute names without a domain are in the driver's domain, so
``gpu.nvidia.com/productName`` is the same attribute.

Pure and defensive: a slice is whatever the API server (or a file) handed us. A malformed slice
or device is reported with what was wrong and is never counted, so it can only keep a node out,
never let one in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from deepseek_operator import names
from deepseek_operator.catalog.gpus import sm_family
from deepseek_operator.nodes.claims import ClaimOwner, HeldDevice
from deepseek_operator.nodes.dra_values import (
    capacity_name,
    device_attribute,
    gfd_style_product,
    parse_quantity_bytes,
    parse_version_cc,
    typed_value,
)

MIXED = "mixed"
# Attribute names the decision reads, as the driver writes them (cmd/gpu-kubelet-plugin).
ATTR_TYPE = "type"
ATTR_PRODUCT = "productName"
ATTR_ARCHITECTURE = "architecture"
ATTR_CC = "cudaComputeCapability"
CAPACITY_MEMORY = "memory"
DEVICE_TYPE_GPU = "gpu"
# attribute -> the one value field (of int, bool, string, version) it must carry.
_REQUIRED: tuple[tuple[str, str], ...] = (
    (ATTR_PRODUCT, "string"),
    (ATTR_ARCHITECTURE, "string"),
    (ATTR_CC, "version"),
)


@dataclass(frozen=True, slots=True)
class DraGpu:
    """One well-formed whole-GPU device of a node's ``gpu.nvidia.com`` pool."""

    name: str
    product: str  # NVML name as published, ``NVIDIA H200``
    architecture: str
    cc: tuple[int, int]
    cc_text: str  # the version as published, ``9.0.0``
    memory_mib: int
    pool: str = ""
    # A device that allows multiple allocations (consumable capacity): per capacity, (name,
    # value, what one claim that asks no capacity consumes: the request policy's default, else
    # the whole value). () = an exclusive device, held whole by any allocation.
    shares: tuple[tuple[str, int, int], ...] = ()


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


def _shares(
    device: Mapping[str, Any], capacity: Mapping[str, Any]
) -> tuple[tuple[str, int, int], ...]:
    """(name, value, one whole-GPU claim's consumption) per capacity of a device that allows
    multiple allocations; () for an exclusive device or a capacity we cannot read (then any
    allocation holds it whole, the cautious count)."""
    if device.get("allowMultipleAllocations") is not True:
        return ()
    out = []
    for name, entry in capacity.items():
        value = (
            parse_quantity_bytes(str(entry.get("value"))) if isinstance(entry, Mapping) else None
        )
        if value is None:
            return ()
        policy = entry.get("requestPolicy")
        default = policy.get("default") if isinstance(policy, Mapping) else None
        need = parse_quantity_bytes(str(default)) if default is not None else value
        out.append((capacity_name(str(name)), value, value if need is None else need))
    return tuple(sorted(out))


def _read_device(device: Any, where: str, pool: str = "") -> tuple[DraGpu | None, str]:
    """A whole-GPU device, or None with why not ("" for a device that is simply no whole GPU)."""
    if not isinstance(device, Mapping) or not isinstance(device.get("name"), str):
        return None, f"{where}: a device without a name ({device!r:.60})"
    label = f"{where} device {device['name']!r}"
    attributes = device.get("attributes")
    if not isinstance(attributes, Mapping):
        return None, f"{label}: no attributes map"
    kind = typed_value(device_attribute(attributes, ATTR_TYPE), "string")
    if kind is None:
        return None, f"{label}: attribute {ATTR_TYPE} missing or not a string"
    if kind != DEVICE_TYPE_GPU:
        return None, ""  # a MIG slice, an IMEX channel, a VFIO device: not a whole GPU
    values: dict[str, str] = {}
    for name, field in _REQUIRED:
        raw = device_attribute(attributes, name)
        value = typed_value(raw, field)
        if value is None:
            shown = "missing" if raw is None else f"{raw!r:.60} (must be {{{field}: ...}})"
            return None, f"{label}: attribute {name} is {shown}"
        values[name] = value
    cc = parse_version_cc(values[ATTR_CC])
    if cc is None:
        return None, (
            f"{label}: attribute {ATTR_CC}={values[ATTR_CC]!r} is not a version (major.minor.patch)"
        )
    capacity = device.get("capacity")
    memory = capacity.get(CAPACITY_MEMORY) if isinstance(capacity, Mapping) else None
    raw_bytes = memory.get("value") if isinstance(memory, Mapping) else None
    size = parse_quantity_bytes(str(raw_bytes)) if isinstance(raw_bytes, (str, int)) else None
    if size is None:
        return (
            None,
            f"{label}: capacity {CAPACITY_MEMORY} is {memory!r:.60}, not {{value: <quantity>}}",
        )
    return DraGpu(
        name=device["name"],
        product=values[ATTR_PRODUCT],
        architecture=values[ATTR_ARCHITECTURE],
        cc=cc,
        cc_text=values[ATTR_CC],
        memory_mib=size // 2**20,
        pool=pool,
        shares=_shares(device, capacity) if isinstance(capacity, Mapping) else (),
    ), ""


@dataclass
class _Pool:
    node: str
    name: str
    generation: int
    expected: int
    slices: list[Mapping[str, Any]]


def _slice_pool(item: Mapping[str, Any], slice_name: str) -> tuple[str, str, int, int] | str:
    """(node, pool, generation, resourceSliceCount) of a slice, or what is wrong with it."""
    spec = item.get("spec")
    if not isinstance(spec, Mapping):
        return "no spec"
    node = spec.get("nodeName")
    if not isinstance(node, str) or not node:
        return "not tied to one node (no spec.nodeName), so its devices are counted on no node"
    pool = spec.get("pool")
    if not isinstance(pool, Mapping) or not isinstance(pool.get("name"), str):
        return "spec.pool.name missing"
    generation, count = pool.get("generation", 0), pool.get("resourceSliceCount", 1)
    if not isinstance(generation, int) or not isinstance(count, int) or count < 1:
        return (
            f"spec.pool generation={generation!r} resourceSliceCount={count!r} "
            "must be integers (count >= 1)"
        )
    return node, pool["name"], generation, count


def _slice_name(item: Mapping[str, Any]) -> str:
    meta = item.get("metadata")
    return str(meta.get("name", "?")) if isinstance(meta, Mapping) else "?"


def _read_pool(pool: _Pool, where: str) -> tuple[list[DraGpu], list[str]]:
    """The GPUs of one complete pool, and its problems.

    A device name published twice in one pool (by one slice or by two) makes the scheduler
    call the whole pool invalid: it allocates none of its devices, so none is counted here,
    and the problem names the pool, the device and the slices that publish it.
    """
    devices: list[DraGpu] = []
    problems: list[str] = []
    owners: dict[str, list[str]] = {}
    for item in pool.slices:
        raw_devices = item["spec"].get("devices") or []
        if not isinstance(raw_devices, list):
            problems.append(f"{where}: spec.devices is not a list")
            continue
        for device in raw_devices:
            name = device.get("name") if isinstance(device, Mapping) else None
            if isinstance(name, str):
                owners.setdefault(name, []).append(_slice_name(item))
            gpu, why = _read_device(device, where, pool.name)
            if gpu is not None:
                devices.append(gpu)
            elif why:
                problems.append(why + "; not counted")
    twice = sorted(name for name, slices in owners.items() if len(slices) > 1)
    if twice:
        shown = ", ".join(
            f"{name!r} (slices {' and '.join(sorted(set(owners[name])))})" for name in twice[:3]
        )
        more = f" and {len(twice) - 3} more" if len(twice) > 3 else ""
        problems.append(
            f"{where}: device {shown}{more} is published twice, so the scheduler treats the "
            "pool as invalid and allocates none of its devices; none is counted"
        )
        return [], problems
    return devices, problems


def read_slices(slices: Iterable[Any], node_names: Iterable[str]) -> DraInventory:
    """Group the ``gpu.nvidia.com`` slices by node and read their GPUs.

    A pool counts only at its newest generation and only once every slice of it is seen
    (``resourceSliceCount``), as the scheduler does: a half-published pool is reported, not
    counted. Slices of other drivers are ignored; a slice naming a node that is not in
    ``node_names`` is reported and counted nowhere.
    """
    known = set(node_names)
    problems: list[tuple[str, str]] = []
    pools: dict[tuple[str, str], _Pool] = {}
    for index, item in enumerate(slices):
        if not isinstance(item, Mapping):
            problems.append((f"#{index}", f"not an object ({item!r:.60})"))
            continue
        meta = item.get("metadata")
        name = str(meta.get("name", f"#{index}")) if isinstance(meta, Mapping) else f"#{index}"
        spec = item.get("spec")
        if isinstance(spec, Mapping) and spec.get("driver") != names.DRA_GPU_DRIVER:
            continue
        found = _slice_pool(item, name)
        if isinstance(found, str):
            problems.append((name, found))
            continue
        node, pool_name, generation, count = found
        if node not in known:
            problems.append((name, f"names node {node!r}, which is not among the Nodes"))
            continue
        pool = pools.get((node, pool_name))
        if pool is None or generation > pool.generation:
            pools[(node, pool_name)] = _Pool(node, pool_name, generation, count, [item])
        elif generation == pool.generation:
            pool.slices.append(item)
    gathered: dict[str, tuple[list[str], list[DraGpu], list[str]]] = {}
    for (node, pool_name), pool in sorted(pools.items()):
        pool_names, devices, node_problems = gathered.setdefault(node, ([], [], []))
        pool_names.append(pool_name)
        where = f"ResourceSlice pool {pool_name!r}"
        if len(pool.slices) != pool.expected:
            node_problems.append(
                f"{where}: {len(pool.slices)} of {pool.expected} slices of generation "
                f"{pool.generation} published, so none of its devices is counted yet"
            )
            continue
        pool_devices, pool_problems = _read_pool(pool, where)
        devices.extend(pool_devices)
        node_problems.extend(pool_problems)
    by_node = {
        node: DraGpus(tuple(p), tuple(sorted(d, key=lambda g: g.name)), tuple(problems_))
        for node, (p, d, problems_) in gathered.items()
    }
    return DraInventory(by_node=by_node, problems=tuple(problems))


def with_claims(inventory: DraInventory, held: Iterable[HeldDevice]) -> DraInventory:
    """``inventory`` with each node's devices that claims hold (``held``, from
    :func:`~deepseek_operator.nodes.claims.held_devices`); a held device that is no well-formed
    GPU of a known node counts nowhere, as it was never counted."""
    where = {
        (d.pool, d.name): node for node, gpus in inventory.by_node.items() for d in gpus.devices
    }
    per_node: dict[str, list[HeldDevice]] = {}
    for h in held:
        node = where.get((h.pool, h.device))
        if node is not None:
            per_node.setdefault(node, []).append(h)
    if not per_node:
        return inventory
    by_node = {
        node: replace(gpus, held=tuple(per_node[node])) if node in per_node else gpus
        for node, gpus in inventory.by_node.items()
    }
    return DraInventory(by_node=by_node, problems=inventory.problems)
