"""Node objects → a typed inventory of GPU facts (pure).

Precedence (design.md §4): the node agent's ``gpu.deepseek-operator.io/`` labels win over GPU
Feature Discovery's ``nvidia.com/`` labels, which win over what the product name implies. NVLink
is inferred from the product ONLY for the exact NVSwitch / NVL-tray product strings in
:data:`INFERRED_NVLINK_PRODUCTS`, and such facts are marked ``inferred`` so every message can
say so. The node-affinity terms in :mod:`deepseek_operator.render.affinity` express exactly the
same precedence, so the scheduler admits exactly the nodes this module calls eligible.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from deepseek_operator import names
from deepseek_operator.catalog.gpus import (
    EXACT_PRODUCT_CC,
    INFERRED_NVLINK_PRODUCTS,
    find_product,
    sm_family,
)

SM100 = "sm100"

# Source tags used in messages.
SOURCE_AGENT = "agent"
SOURCE_GFD = "GFD"
SOURCE_PRODUCT = "inferred from product"


@dataclass(frozen=True)
class Taint:
    """A node taint."""

    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class NodeFacts:
    """What the operator knows about one node's GPUs."""

    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    unschedulable: bool = False
    ready: bool = True
    taints: tuple[Taint, ...] = ()
    product: str | None = None
    cc: tuple[int, int] | None = None
    cc_source: str | None = None
    family: str | None = None
    nvlink_fully_connected: bool | None = None
    nvlink_source: str | None = None
    nvlink_domain_size: int | None = None
    gpu_memory_mib: int | None = None
    memory_source: str | None = None

    @property
    def is_sm100(self) -> bool:
        """vLLM's ``is_device_capability_family(100)``: compute capability major == 10."""
        return self.family == SM100

    @property
    def cc_text(self) -> str:
        """``10.0`` or ``unknown``."""
        return f"{self.cc[0]}.{self.cc[1]}" if self.cc else "unknown"

    def gpus(self, resource_name: str) -> int:
        """Allocatable GPUs of ``resource_name``."""
        return self.allocatable.get(resource_name, 0)


@dataclass(frozen=True)
class NodeInventory:
    """All nodes the operator can see, in a stable order."""

    nodes: tuple[NodeFacts, ...]

    def __len__(self) -> int:
        return len(self.nodes)


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _quantity_int(value: Any) -> int:
    """Whole units of an extended-resource quantity ('4', 4, '4000m'); 0 when unparsable."""
    text = str(value).strip()
    if text.endswith("m"):
        milli = _int(text[:-1])
        return milli // 1000 if milli is not None else 0
    parsed = _int(text)
    return parsed if parsed is not None else 0


def _parse_cc(text: str) -> tuple[int, int] | None:
    major, _, minor = text.partition(".")
    a, b = _int(major), _int(minor or "0")
    return (a, b) if a is not None and b is not None else None


def _tristate(text: str | None) -> bool | None:
    if text == "true":
        return True
    if text == "false":
        return False
    return None


def node_facts(node: Mapping[str, Any]) -> NodeFacts:
    """Read one Node object (as returned by the API server) into :class:`NodeFacts`."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    labels: dict[str, str] = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    allocatable = {str(k): _quantity_int(v) for k, v in (status.get("allocatable") or {}).items()}
    taints = tuple(
        Taint(str(t.get("key", "")), str(t.get("value", "") or ""), str(t.get("effect", "")))
        for t in spec.get("taints") or []
    )
    conditions = status.get("conditions") or []
    ready = all(c.get("status") == "True" for c in conditions if c.get("type") == "Ready")

    gfd_product = labels.get(names.GFD_PRODUCT)
    product = labels.get(names.AGENT_PRODUCT) or gfd_product

    # Compute capability: the decision uses exactly the labels node affinity can express
    # (render/affinity.py): agent sm-family, then GFD compute.major, then the exact product.
    cc: tuple[int, int] | None = None
    cc_source: str | None = None
    family: str | None = None
    if names.AGENT_SM_FAMILY in labels:
        family, cc_source = labels[names.AGENT_SM_FAMILY], SOURCE_AGENT
        cc = _parse_cc(labels.get(names.AGENT_CC, ""))
    elif names.GFD_CC_MAJOR in labels:
        major = _int(labels[names.GFD_CC_MAJOR])
        minor = _int(labels.get(names.GFD_CC_MINOR, "0")) or 0
        if major is not None:
            cc, cc_source, family = (major, minor), SOURCE_GFD, sm_family(major)
    elif gfd_product in EXACT_PRODUCT_CC:
        cc, cc_source = EXACT_PRODUCT_CC[gfd_product], SOURCE_PRODUCT
        family = sm_family(cc[0])
    if cc is None and product is not None and (known := find_product(product)) is not None:
        cc = known.cc  # display only; the decision rests on ``family``

    nvlink: bool | None = None
    nvlink_source: str | None = None
    if names.AGENT_NVLINK_FULLY_CONNECTED in labels:
        nvlink = _tristate(labels[names.AGENT_NVLINK_FULLY_CONNECTED])
        nvlink_source = SOURCE_AGENT
    elif gfd_product in INFERRED_NVLINK_PRODUCTS:
        nvlink, nvlink_source = True, SOURCE_PRODUCT
    domain = _int(labels.get(names.AGENT_NVLINK_DOMAIN_SIZE, ""))
    # Per-GPU memory, MiB: the agent's measurement, else GFD's (the same precedence as affinity).
    memory: int | None = None
    memory_source: str | None = None
    # An unparsable value counts as 0, as a `Gt` node-selector requirement would not match it.
    if names.AGENT_MEMORY_MIB in labels:
        memory, memory_source = _int(labels[names.AGENT_MEMORY_MIB]) or 0, SOURCE_AGENT
    elif names.GFD_MEMORY in labels:
        memory, memory_source = _int(labels[names.GFD_MEMORY]) or 0, SOURCE_GFD

    return NodeFacts(
        name=str(meta.get("name", "")),
        labels=labels,
        allocatable=allocatable,
        unschedulable=bool(spec.get("unschedulable", False)),
        ready=ready,
        taints=taints,
        product=product,
        cc=cc,
        cc_source=cc_source,
        family=family,
        nvlink_fully_connected=nvlink,
        nvlink_source=nvlink_source,
        nvlink_domain_size=domain,
        gpu_memory_mib=memory,
        memory_source=memory_source,
    )


def build_inventory(nodes: Iterable[Mapping[str, Any]]) -> NodeInventory:
    """Build the inventory from Node objects, sorted by name for stable messages."""
    return NodeInventory(tuple(sorted((node_facts(n) for n in nodes), key=lambda f: f.name)))


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Taint) -> bool:
    """Kubernetes' toleration matching for one taint."""
    for tol in tolerations:
        effect = tol.get("effect") or ""
        if effect and effect != taint.effect:
            continue
        key = tol.get("key") or ""
        operator = tol.get("operator") or "Equal"
        if not key:
            if operator == "Exists":
                return True
            continue
        if key != taint.key:
            continue
        if operator == "Exists" or str(tol.get("value") or "") == taint.value:
            return True
    return False


def blocking_taints(node: NodeFacts, tolerations: Iterable[Mapping[str, Any]]) -> list[Taint]:
    """Taints that keep a pod with ``tolerations`` off ``node`` (NoSchedule / NoExecute)."""
    tols = list(tolerations)
    return [
        t for t in node.taints if t.effect in ("NoSchedule", "NoExecute") and not tolerates(tols, t)
    ]
