"""One device of NVIDIA's ``gpu.nvidia.com`` DRA driver, as a ResourceSlice publishes it: the
attribute and capacity names the decision reads, the Kubernetes value formats they carry (typed
attributes, semantic versions, quantities) and a whole GPU read into a :class:`DraGpu`.

The driver publishes each whole GPU as a device ``gpu-<minor>`` with the typed attributes
``type`` (string ``gpu``), ``productName`` and ``architecture`` (strings),
``cudaComputeCapability`` (a semver version, ``10.0.0``) and the capacity ``memory`` (a
quantity of bytes). Attribute names without a domain are in the driver's domain, so
``gpu.nvidia.com/productName`` is the same attribute. A malformed device is read as None with
what was wrong, never as a GPU.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from deepseek_operator import names

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
_VALUE_FIELDS = ("int", "bool", "string", "version")
_SEMVER = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(?:[-+][0-9A-Za-z.+-]*)?")
_QUANTITY = re.compile(r"([+-]?[0-9]+(?:\.[0-9]*)?|[+-]?\.[0-9]+)([A-Za-z]*|[eE][+-]?[0-9]+)")
_SUFFIX = {
    "": 1,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
_GFD_DROP = re.compile(r"[^A-Za-z0-9\-_. ]")


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


def gfd_style_product(name: str) -> str:
    """``NVIDIA B300 SXM6 AC`` → ``NVIDIA-B300-SXM6-AC``: the NVML name the driver publishes, as
    GPU Feature Discovery (and the agent, ``agent/labels.py``) writes it, so one product catalog
    serves both."""
    return "-".join(_GFD_DROP.sub("", name).split())


def parse_quantity_bytes(text: str) -> int | None:
    """A Kubernetes quantity (``80Gi``, ``85899345920``, ``1e9``) in whole units, or None."""
    match = _QUANTITY.fullmatch(text.strip())
    if match is None:
        return None
    number, suffix = match.groups()
    try:
        value = Decimal(number)
        if suffix[:1] in ("e", "E"):
            value = value.scaleb(int(suffix[1:]))
        elif suffix in _SUFFIX:
            value *= _SUFFIX[suffix]
        else:
            return None
    except (InvalidOperation, ValueError):
        return None
    return int(value) if value >= 0 else None


def parse_version_cc(text: str) -> tuple[int, int] | None:
    """``10.0.0`` → ``(10, 0)``; None unless ``text`` is a semantic version."""
    match = _SEMVER.fullmatch(text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _attribute(attributes: Mapping[str, Any], name: str) -> Any:
    """An attribute by its short or driver-qualified name (the same attribute to the scheduler)."""
    if name in attributes:
        return attributes[name]
    return attributes.get(f"{names.DRA_GPU_DRIVER}/{name}")


def capacity_name(name: str) -> str:
    """A capacity's name without the driver's domain (``gpu.nvidia.com/memory`` is ``memory``)."""
    prefix = f"{names.DRA_GPU_DRIVER}/"
    return name[len(prefix) :] if name.startswith(prefix) else name


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


def _typed(value: Any, kind: str) -> str | None:
    """The ``kind`` field of a DeviceAttribute when it is the only field set, else None."""
    if not isinstance(value, Mapping):
        return None
    set_fields = [f for f in _VALUE_FIELDS if f in value]
    field = value.get(kind)
    return field if set_fields == [kind] and isinstance(field, str) else None


def read_device(device: Any, where: str, pool: str = "") -> tuple[DraGpu | None, str]:
    """A whole-GPU device, or None with why not ("" for a device that is simply no whole GPU)."""
    if not isinstance(device, Mapping) or not isinstance(device.get("name"), str):
        return None, f"{where}: a device without a name ({device!r:.60})"
    label = f"{where} device {device['name']!r}"
    attributes = device.get("attributes")
    if not isinstance(attributes, Mapping):
        return None, f"{label}: no attributes map"
    kind = _typed(_attribute(attributes, ATTR_TYPE), "string")
    if kind is None:
        return None, f"{label}: attribute {ATTR_TYPE} missing or not a string"
    if kind != DEVICE_TYPE_GPU:
        return None, ""  # a MIG slice, an IMEX channel, a VFIO device: not a whole GPU
    values: dict[str, str] = {}
    for name, field in _REQUIRED:
        raw = _attribute(attributes, name)
        value = _typed(raw, field)
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
