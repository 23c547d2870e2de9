"""How the values of NVIDIA's DRA driver read: a device attribute's one typed field, a capacity
quantity in bytes, a compute capability from its semantic version, the product name as GPU
Feature Discovery writes it, and attribute or capacity names with or without the driver's domain
(pure; :mod:`.dra` reads slices with them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from deepseek_operator import names

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


def device_attribute(attributes: Mapping[str, Any], name: str) -> Any:
    """An attribute by its short or driver-qualified name (the same attribute to the scheduler)."""
    if name in attributes:
        return attributes[name]
    return attributes.get(f"{names.DRA_GPU_DRIVER}/{name}")


def capacity_name(name: str) -> str:
    """A capacity's name without the driver's domain (``gpu.nvidia.com/memory`` is ``memory``)."""
    prefix = f"{names.DRA_GPU_DRIVER}/"
    return name[len(prefix) :] if name.startswith(prefix) else name


def typed_value(value: Any, kind: str) -> str | None:
    """The ``kind`` field of a DeviceAttribute when it is the only field set, else None."""
    if not isinstance(value, Mapping):
        return None
    set_fields = [f for f in _VALUE_FIELDS if f in value]
    field = value.get(kind)
    return field if set_fields == [kind] and isinstance(field, str) else None
