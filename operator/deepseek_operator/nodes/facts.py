"""Node objects → a typed inventory of GPU facts (pure).

Every GPU fact is read through the precedence table of :mod:`deepseek_operator.nodes.precedence`
(agent labels over GFD labels over the exact product), the same table the node-affinity terms are
built from, so the scheduler admits exactly the nodes the decision calls eligible. Facts inferred
from the product are marked so every message can say so. A node's ``gpu.nvidia.com``
ResourceSlices (:mod:`deepseek_operator.nodes.dra`) are one more source in that table; on a
DRA-only node they are also the GPU count, since its ``status.allocatable`` has no GPUs.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from deepseek_operator import names
from deepseek_operator.catalog.gpus import find_product
from deepseek_operator.nodes.claims import GPU_POD_CLAIM, ClaimOwner, held_devices
from deepseek_operator.nodes.dra import read_slices, with_claims
from deepseek_operator.nodes.dra_gpus import DraGpus
from deepseek_operator.nodes.precedence import (
    COMPUTE,
    MEMORY_MIB,
    NVLINK,
    Fact,
    label_problems,
    parse_int,
)
from deepseek_operator.nodes.taints import Taint, parse_taints
from deepseek_operator.recent import RecentMemory

SM100 = "sm100"
# Labels that state a node has GPUs, in the order messages quote them (a count says the most).
_GPU_LABELS = (
    names.AGENT_COUNT,
    names.GFD_COUNT,
    names.AGENT_PRODUCT,
    names.GFD_PRODUCT,
    names.AGENT_PRESENT,
    names.GFD_PRESENT,
)
_PRESENCE_LABELS = (names.AGENT_PRESENT, names.GFD_PRESENT)
# Entries per inventory, the least recently used dropped first. A burst's re-reconciles (child
# events soon after a create) and the per-pool entries every decision reads stay; the
# decisions of 1,000 idle objects (about 40 KB each) are not all kept until the next node
# change, when the inventory and its memo are replaced anyway.
MEMO_LIMIT = 256

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
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
    clique: str | None = (
        None  # NVLink clique "<ClusterUUID>.<CliqueId>", only with a healthy fabric
    )
    clique_source: str | None = None  # the label key it was read from
    fabric_state: str | None = None  # the agent's mnnvl.state, None without the agent's label
    label_problems: tuple[str, ...] = ()  # GPU-fact labels the scheduler cannot match, quoted
    dra: DraGpus | None = None  # the node's gpu.nvidia.com ResourceSlices, None without any

    @property
    def is_sm100(self) -> bool:
        """vLLM's ``is_device_capability_family(100)``: compute capability major == 10."""
        return self.family == SM100

    @property
    def cc_text(self) -> str:
        """``10.0`` or ``unknown``."""
        return f"{self.cc[0]}.{self.cc[1]}" if self.cc else "unknown"

    def counted_dra(self, resource_name: str) -> DraGpus | None:
        """This node's DRA devices when they stand for its GPUs of ``resource_name`` (it has no
        allocatable ones: a DRA-only node hands GPUs out through claims), else None."""
        return self.dra if self.allocatable.get(resource_name, 0) <= 0 else None

    def gpus(self, resource_name: str) -> int:
        """Allocatable GPUs of ``resource_name``; on a node without any, its well-formed DRA
        devices."""
        dra = self.counted_dra(resource_name)
        return dra.count if dra is not None else self.allocatable.get(resource_name, 0)

    def free_gpus(self, resource_name: str, owner: ClaimOwner | None = None) -> int:
        """:meth:`gpus` less the DRA devices held by claims other than ``owner``'s pods' (a
        device-plugin node's allocatable GPUs are counted as they are)."""
        dra = self.counted_dra(resource_name)
        return dra.free(owner) if dra is not None else self.gpus(resource_name)

    @property
    def gpus_from_dra(self) -> bool:
        """Whether this node's GPUs are DRA devices (no allocatable GPUs, some slice devices)."""
        return (
            self.dra is not None
            and self.dra.count > 0
            and not any(v > 0 for k, v in self.allocatable.items() if k.startswith("nvidia.com/"))
        )

    @property
    def problems(self) -> tuple[str, ...]:
        """Labels the scheduler cannot match and malformed DRA slices or devices, one line each."""
        return self.label_problems + (self.dra.problems if self.dra is not None else ())

    def evidence(self, fact: Fact[Any, Any]) -> str:
        """The label or ResourceSlice that decides ``fact`` here, quoted with its source."""
        return fact.evidence(self.labels, self.dra)

    def gpu_label(self) -> str | None:
        """The first label that says this node has GPUs, quoted as written (``key='value'``), or
        its ResourceSlice pool, or None: lets messages name a GPU node whose
        ``status.allocatable`` shows none."""
        for key in _GPU_LABELS:
            value = self.labels.get(key)
            if value is not None and (key not in _PRESENCE_LABELS or value == "true"):
                return f"{key}={value!r}"
        if self.dra is not None:
            return f"{names.DRA_GPU_DRIVER} ResourceSlice pool " + ", ".join(
                repr(p) for p in self.dra.pools
            )
        return None


@dataclass(frozen=True)
class NodeInventory:
    """All nodes the operator can see, in a stable order."""

    nodes: tuple[NodeFacts, ...]
    # gpu.nvidia.com ResourceSlices tied to no Node we know, or to no node at all: (slice, why).
    slice_problems: tuple[tuple[str, str], ...] = ()
    # label key -> value -> nodes, filled on first use per key: a nodeSelector then costs the
    # matching nodes, not the whole fleet (10,000 Nodes, one pool of 2,000: 5x fewer visits).
    _by_label: dict[str, dict[str, list[NodeFacts]]] = field(
        default_factory=dict, compare=False, repr=False
    )
    # Results of pure functions of this inventory (see memoized); gone with the inventory.
    _memo: RecentMemory[Hashable, Any] = field(
        default_factory=lambda: RecentMemory(MEMO_LIMIT), compare=False, repr=False
    )

    def __len__(self) -> int:
        return len(self.nodes)

    def with_labels(self, selector: Mapping[str, str]) -> Sequence[NodeFacts]:
        """The nodes carrying every ``key: value`` of ``selector``, in inventory order."""
        if not selector:
            return self.nodes
        buckets = [self._label_index(key).get(value, []) for key, value in selector.items()]
        smallest = min(buckets, key=len)
        return [n for n in smallest if all(n.labels.get(k) == v for k, v in selector.items())]

    def named(self, name: str) -> NodeFacts | None:
        """The node called ``name`` (None when the inventory has none by that name)."""
        by_name = self.memoized(("nodes by name",), lambda: {n.name: n for n in self.nodes})
        return by_name.get(name)

    def memoized(self, key: Hashable, compute: Callable[[], _T]) -> _T:
        """``compute()``, remembered under ``key`` while this inventory lives (the
        :data:`MEMO_LIMIT` most recently used keys).

        Only for pure functions of the inventory and of what ``key`` holds: the inventory is
        immutable and replaced on every node change, so nothing stale is ever returned.
        """
        return cast(_T, self._memo.remembered(key, compute))

    def claim_key(self, owner: ClaimOwner | None) -> ClaimOwner | None:
        """``owner`` when some claim of its pods holds a device here, else None: the decisions
        of servings that hold nothing see the same free devices, so they share one result."""
        if owner is None:
            return None

        def holders() -> dict[str, set[str]]:  # namespace -> pods whose claims hold devices
            out: dict[str, set[str]] = {}
            for n in self.nodes:
                for h in n.dra.held if n.dra else ():
                    if h.pod and h.pod_claim == GPU_POD_CLAIM:
                        out.setdefault(h.namespace, set()).add(h.pod)
            return out

        pods = self.memoized(("claim holders",), holders).get(owner.namespace, ())
        return owner if any(owner.owns_pod(pod) for pod in pods) else None

    def _label_index(self, key: str) -> dict[str, list[NodeFacts]]:
        index = self._by_label.get(key)
        if index is None:
            index = {}
            for node in self.nodes:
                value = node.labels.get(key)
                if value is not None:
                    index.setdefault(value, []).append(node)
            self._by_label[key] = index
        return index


def _quantity_int(value: Any) -> int:
    """Whole units of an extended-resource quantity ('4', 4, '4000m'); 0 when unparsable."""
    text = str(value).strip()
    if text.endswith("m"):
        milli = parse_int(text[:-1])
        return milli // 1000 if milli is not None else 0
    parsed = parse_int(text)
    return parsed if parsed is not None else 0


def read_clique(labels: Mapping[str, str]) -> tuple[str | None, str | None]:
    """The node's NVLink clique and the label key it came from, or ``(None, None)``.

    GPU Feature Discovery's ``nvidia.com/gpu.clique`` first, else the agent's ``mnnvl.clique``
    (both ``<ClusterUUID>.<CliqueId>``: a clique id is unique only with its cluster UUID). When
    the agent reports a fabric state other than ``ready`` (pending, degraded, none), the node is
    in no usable clique whatever GFD says: GFD refreshes its label only once a minute and does
    not look at fabric health.
    """
    if not fabric_usable(labels):
        return None, None
    for key in (names.GFD_CLIQUE, names.AGENT_MNNVL_CLIQUE):
        if labels.get(key):
            return labels[key], key
    return None, None


def fabric_usable(labels: Mapping[str, str]) -> bool:
    """No agent fabric state, or the agent's ``mnnvl.state`` is ``ready``."""
    state = labels.get(names.AGENT_MNNVL_STATE)
    return state is None or state == names.MNNVL_STATE_READY


# Labels rewritten on every pass of their producer that carry no GPU fact.
IGNORED_NODE_LABELS = (names.GFD_TIMESTAMP,)


def fingerprint(facts: NodeFacts) -> NodeFacts:
    """``facts`` without the labels that change on every pass, so equal facts compare equal.

    Label keys and values are interned: 10,000 Nodes repeat the same few hundred strings
    (keys, products, pools), and one copy of each is what a fleet-sized index can afford.
    """
    labels = {
        sys.intern(k): sys.intern(v)
        for k, v in facts.labels.items()
        if k not in IGNORED_NODE_LABELS
    }
    return dataclasses.replace(facts, labels=labels)


def facts_of(node: dict[str, Any]) -> NodeFacts:
    """The facts the operator keeps of one Node object (the Node watch's reducer)."""
    return fingerprint(node_facts(node))


def node_facts(node: Mapping[str, Any], dra: DraGpus | None = None) -> NodeFacts:
    """Read one Node object (as returned by the API server) into :class:`NodeFacts`.

    ``dra``: what the node's ``gpu.nvidia.com`` ResourceSlices say (see :func:`build_inventory`).
    """
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    labels: dict[str, str] = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    allocatable = {str(k): _quantity_int(v) for k, v in (status.get("allocatable") or {}).items()}
    taints = parse_taints(spec.get("taints") or [])
    conditions = status.get("conditions") or []
    ready = all(c.get("status") == "True" for c in conditions if c.get("type") == "Ready")
    clique, clique_source = read_clique(labels)
    return NodeFacts(
        name=str(meta.get("name", "")),
        labels=labels,
        allocatable=allocatable,
        unschedulable=bool(spec.get("unschedulable", False)),
        ready=ready,
        taints=taints,
        clique=clique,
        clique_source=clique_source,
        fabric_state=labels.get(names.AGENT_MNNVL_STATE),
        label_problems=label_problems(labels),
        **_gpu_facts(labels, dra),
    )


def _gpu_facts(labels: Mapping[str, str], dra: DraGpus | None) -> dict[str, Any]:
    """The NodeFacts fields the precedence table decides from ``labels`` and ``dra``."""
    dra_product = dra.product if dra is not None else None
    product = labels.get(names.AGENT_PRODUCT) or dra_product or labels.get(names.GFD_PRODUCT)
    compute, cc_source = COMPUTE.read(labels, dra)
    family, cc = compute if compute is not None else (None, None)
    stated = names.AGENT_SM_FAMILY in labels or names.GFD_CC_MAJOR in labels
    if (
        cc is None
        and not stated
        and product is not None
        and (known := find_product(product)) is not None
    ):
        # Display only (the decision rests on ``family``), and never over a garbled CC label.
        cc = known.cc
    nvlink, nvlink_source = NVLINK.read(labels, dra)
    memory, memory_source = MEMORY_MIB.read(labels, dra)
    return {
        "product": product,
        "cc": cc,
        "cc_source": cc_source,
        "family": family,
        "nvlink_fully_connected": nvlink,
        "nvlink_source": nvlink_source,
        "nvlink_domain_size": parse_int(labels.get(names.AGENT_NVLINK_DOMAIN_SIZE, "")),
        "gpu_memory_mib": memory,
        "memory_source": memory_source,
        "dra": dra,
    }


def with_dra(facts: NodeFacts, dra: DraGpus | None) -> NodeFacts:
    """``facts`` (read from a Node alone) merged with what its ResourceSlices say: the operator
    keeps Nodes and slices apart, as they change apart, and merges them per inventory."""
    if dra is None and facts.dra is None:
        return facts
    return dataclasses.replace(facts, **_gpu_facts(facts.labels, dra))


def build_inventory(
    nodes: Iterable[Mapping[str, Any]], slices: Iterable[Any] = (), claims: Iterable[Any] = ()
) -> NodeInventory:
    """Build the inventory from Node objects, ResourceSlices and ResourceClaims, sorted by name
    for stable messages. Slices and claim devices of drivers other than ``gpu.nvidia.com`` are
    ignored; a claim's allocated devices are held (not free) on their node."""
    node_list = list(nodes)
    node_names = [str((n.get("metadata") or {}).get("name", "")) for n in node_list]
    dra = with_claims(read_slices(slices, node_names), held_devices(claims))
    facts = (
        node_facts(n, dra.by_node.get(name)) for n, name in zip(node_list, node_names, strict=True)
    )
    return NodeInventory(tuple(sorted(facts, key=lambda f: f.name)), dra.problems)
