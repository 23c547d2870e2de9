"""Which nodes a decision admits, and whether they can hold every replica.

:class:`NodeRequirement` is the node-level half of a decision (SM100, fully NVLink-connected,
…). ``render/affinity.py`` turns the same requirement into node-affinity terms over the same
labels, so the scheduler admits exactly the nodes :meth:`NodeRequirement.admits` admits.
Capacity counts whole pods per node from allocatable GPUs, or on a DRA node from its devices
that no claim holds but the serving's own pods' (:mod:`deepseek_operator.nodes.claims`).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from deepseek_operator import names
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.nodes.claims import ClaimOwner
from deepseek_operator.nodes.facts import NodeFacts, NodeInventory, fabric_usable
from deepseek_operator.nodes.precedence import COMPUTE, MEMORY_MIB, NVLINK, parse_gt_int
from deepseek_operator.nodes.taints import blocking_taints

# Agent sm-family values with compute capability >= 10.0 (FlashInfer moe_ep's guard, A9).
CC10_PLUS_FAMILIES: tuple[str, ...] = ("sm100", "sm110", "sm120", "sm130")


class Requirement(enum.Enum):
    """Node-level condition of a decision."""

    ANY_GPU = "any-gpu"
    SM100 = "sm100"
    CC_AT_LEAST_10 = "cc>=10.0"
    MEGA_MOE = "sm100+nvlink"
    NONE = "none"


@dataclass(frozen=True)
class NodeRequirement:
    """A requirement plus, for NONE, the check that made the backend unrunnable."""

    kind: Requirement
    reason: str = ""
    # Per-GPU memory a pod needs (MiB); 0 = no memory check. Nodes whose memory labels are
    # absent are admitted (nothing to check against), exactly as the affinity terms do.
    min_gpu_memory_mib: int = 0
    # Multi-node groups confined to one NVLink clique: the node label that names the clique
    # (nvidia.com/gpu.clique or the agent's mnnvl.clique); None = no clique needed.
    clique_key: str | None = None

    def admits(self, node: NodeFacts) -> bool:
        """Whether the decision holds on ``node`` (GPU count aside)."""
        return not self.why_not(node)

    def why_not(self, node: NodeFacts) -> str:
        """Empty when admitted, else what the node lacks."""
        kind = self.kind
        if kind is Requirement.NONE:
            return f"backend cannot run ({self.reason} failed)"
        memory = node.gpu_memory_mib
        if self.min_gpu_memory_mib and memory is not None and memory < self.min_gpu_memory_mib:
            return memory_shortfall(node, self.min_gpu_memory_mib)
        if self.clique_key is not None and not (
            node.labels.get(self.clique_key) and fabric_usable(node.labels)
        ):
            state = node.fabric_state or "no agent fabric state"
            return f"in no usable NVLink clique (no {self.clique_key} label or fabric {state})"
        if kind is Requirement.ANY_GPU:
            return ""
        if kind is Requirement.CC_AT_LEAST_10:
            if node.family not in CC10_PLUS_FAMILIES:
                return (
                    f"compute capability {node.cc_text} below 10.0 (from {node.evidence(COMPUTE)})"
                )
            return ""
        if not node.is_sm100:
            return (
                f"not SM100 ({node.product or 'unknown product'}, CC {node.cc_text}, from "
                f"{node.evidence(COMPUTE)})"
            )
        if kind is Requirement.MEGA_MOE and node.nvlink_fully_connected is not True:
            state = "unknown" if node.nvlink_fully_connected is None else "false"
            return f"NVLink not fully connected ({state}, from {node.evidence(NVLINK)})"
        return ""


def memory_shortfall(node: NodeFacts, minimum_mib: int) -> str:
    """Why ``node``'s GPU memory label keeps it out, quoting the label as written.

    A value the scheduler's ``Gt`` cannot compare (``1e99``, ``80GiB``) is no small number: no
    affinity term admits the node, so the message says that rather than "0 MiB".
    """
    if node.dra is not None and MEMORY_MIB.decided_by_dra(node.labels, node.dra):
        return (
            f"GPU memory {node.gpu_memory_mib} MiB (from {node.evidence(MEMORY_MIB)}) is below "
            f"the {minimum_mib} MiB per GPU the checkpoint needs"
        )
    key = MEMORY_MIB.stating_key(node.labels)
    if key is None:
        return ""
    raw = node.labels[key]
    label = f"{key}={raw!r}"
    if parse_gt_int(raw) is None:
        return (
            f"GPU memory label {label} is not an integer the scheduler's Gt can compare, so no "
            f"affinity term with a minimum ({minimum_mib} MiB per GPU) admits the node"
        )
    return (
        f"GPU memory label {label} ({node.memory_source}) is below the {minimum_mib} MiB per "
        "GPU the checkpoint needs"
    )


@dataclass(frozen=True)
class CliqueCapacity:
    """One NVLink clique among the eligible nodes and how many whole groups it holds."""

    clique: str
    nodes: int
    pods: int  # pods of gpus_per_pod GPUs its eligible nodes hold
    groups: int  # whole multi-node groups (pods // pods_per_replica)

    def describe(self) -> str:
        """``<clique>: 4 nodes, 2 group(s)``."""
        return f"{self.clique}: {self.nodes} node(s), {self.groups} group(s)"


@dataclass(frozen=True)
class Placement:
    """Where the pods may go and whether every replica fits."""

    gpus_per_pod: int
    pods_per_replica: int
    replicas: int
    candidates: int
    eligible: tuple[str, ...]
    capacity: int
    placeable: bool
    message: str
    # Per clique, when multi-node groups are confined to one clique (else empty).
    cliques: tuple[CliqueCapacity, ...] = ()
    reason: str = ""  # the Placeable condition's reason when not placeable ("" = the default)

    @property
    def holding_cliques(self) -> tuple[str, ...]:
        """The cliques that can hold at least one whole group."""
        return tuple(c.clique for c in self.cliques if c.groups > 0)


def _base_rejection(spec: DeepSeekServingSpec, node: NodeFacts) -> str:
    if node.gpus(spec.gpu_resource_name) <= 0:
        return f"no allocatable {spec.gpu_resource_name}"
    if node.unschedulable:
        return "unschedulable (cordoned)"
    if not node.ready:
        return "not Ready"
    for key, value in spec.node_selector.items():
        if node.labels.get(key) != value:
            return f"does not match spec.nodeSelector {key}={value}"
    if node.taints:
        blocking = blocking_taints(node, [t.manifest() for t in spec.tolerations])
        if blocking:
            t = blocking[0]
            return f"taint {t.key}={t.value}:{t.effect} not tolerated"
    return ""


def candidates(spec: DeepSeekServingSpec, inventory: NodeInventory) -> list[NodeFacts]:
    """GPU nodes the pods could be scheduled on at all (selector, taints, cordon, readiness)."""
    return [n for n in inventory.with_labels(spec.node_selector) if not _base_rejection(spec, n)]


def excluded_gpu_nodes(
    spec: DeepSeekServingSpec, inventory: NodeInventory
) -> tuple[tuple[str, str], ...]:
    """Nodes whose labels say they have GPUs but that are no candidates, with why.

    A node labelled with GPUs whose ``status.allocatable`` has none of ``spec.gpuResourceName``
    (device plugin not running, GPUs fenced off) is the usual surprise, so messages name it,
    quoting the label, rather than leaving it out of every count.
    """
    out: list[tuple[str, str]] = []
    for node in inventory.with_labels(spec.node_selector):
        label = node.gpu_label()
        if label is None:
            continue
        why = _base_rejection(spec, node)
        if not why:
            continue
        if node.gpus(spec.gpu_resource_name) <= 0:
            resource = spec.gpu_resource_name
            shown = str(node.allocatable[resource]) if resource in node.allocatable else "missing"
            why = f"labelled {label} but status.allocatable[{resource}] is {shown}"
            if node.dra is not None:
                # Say why the slices gave no GPU either: that is the one a DRA user must fix.
                why += f", and its {names.DRA_GPU_DRIVER} ResourceSlices have no well-formed GPU"
                why += "".join(f" ({p})" for p in node.dra.problems[:2])
        out.append((node.name, why))
    # Slices tied to no Node: a typo'd nodeName hides a whole node's GPUs, so say so.
    out.extend((f"ResourceSlice {name}", why) for name, why in inventory.slice_problems)
    return tuple(out)


def place(
    spec: DeepSeekServingSpec,
    cands: Sequence[NodeFacts],
    requirement: NodeRequirement,
    gpus_per_pod: int,
    pods_per_replica: int,
    excluded: Sequence[tuple[str, str]] = (),
    owner: ClaimOwner | None = None,
) -> Placement:
    """Eligible nodes and replica capacity for ``requirement`` among ``cands``.

    ``excluded``: GPU-labelled nodes that are no candidates, and why (named in the message).
    ``owner``: the serving whose pods' claims hold devices that count as free for it.
    """
    resource = spec.gpu_resource_name
    eligible: list[str] = []
    pods = 0
    rejected: list[tuple[str, str]] = []
    per_clique: dict[str, list[int]] = {}  # clique -> [nodes, pods]
    devices = [0, 0]  # DRA devices of admitted nodes: [free, all]
    for node in cands:
        why = requirement.why_not(node)
        if not why:
            gpus = node.free_gpus(resource, owner)
            dra = node.counted_dra(resource)
            if dra is not None:
                devices[0] += gpus
                devices[1] += dra.count
            if gpus >= gpus_per_pod:
                eligible.append(node.name)
                pods += gpus // gpus_per_pod
                if requirement.clique_key is not None:
                    entry = per_clique.setdefault(node.labels[requirement.clique_key], [0, 0])
                    entry[0] += 1
                    entry[1] += gpus // gpus_per_pod
                continue
            why = (
                f"{free_devices(gpus, dra.count)} < {gpus_per_pod} per pod"
                if dra is not None
                else f"{gpus} allocatable {resource} < {gpus_per_pod} per pod"
            )
        rejected.append((node.name, why))
    cliques = tuple(
        CliqueCapacity(clique, n, p, p // pods_per_replica if pods_per_replica else 0)
        for clique, (n, p) in sorted(per_clique.items())
    )
    if requirement.clique_key is not None:
        # A group never straddles two cliques: count whole groups per clique.
        capacity = sum(c.groups for c in cliques)
    else:
        capacity = pods // pods_per_replica if pods_per_replica else 0
    placeable = capacity >= spec.replicas and requirement.kind is not Requirement.NONE
    message = (
        f"{len(eligible)}/{len(cands)} candidate nodes can host a {gpus_per_pod}-GPU pod "
        f"(capacity {capacity} replica(s), {spec.replicas} wanted)"
    )
    if devices[1]:
        message += "; counted from free DRA devices: " + free_devices(*devices)
    if requirement.clique_key is not None:
        message += (
            f"; each {pods_per_replica}-pod group stays in one NVLink clique ({requirement.clique_key}): "
            + ("; ".join(c.describe() for c in cliques) if cliques else "no clique among them")
        )
    if rejected and (not placeable or len(rejected) <= 5):
        message += "; rejected: " + _summarise(rejected)
    if excluded and (not placeable or len(excluded) <= 5):
        message += "; GPU nodes that are no candidates: " + _summarise(excluded)
    return Placement(
        gpus_per_pod=gpus_per_pod,
        pods_per_replica=pods_per_replica,
        replicas=spec.replicas,
        candidates=len(cands),
        eligible=tuple(eligible),
        capacity=capacity,
        placeable=placeable,
        message=message,
        cliques=cliques,
    )


def free_devices(free: int, total: int) -> str:
    """``4 of 4 devices free`` or ``2 of 4 devices free, 2 held by other claims``."""
    held = total - free
    return f"{free} of {total} devices free" + (f", {held} held by other claims" if held else "")


def pool_clique_key(nodes: Sequence[NodeFacts]) -> str | None:
    """The label that names the NVLink clique of every clique node among ``nodes``, or None.

    The agent's ``mnnvl.clique`` when every node in a usable clique carries it (it also states
    fabric health), else GFD's ``nvidia.com/gpu.clique``. None: no node is in a usable clique
    (not a multi-node NVLink pool). One key for the pool, because a pod-affinity topology key is
    one label.
    """
    in_clique = [n for n in nodes if n.clique is not None]
    if not in_clique:
        return None
    if all(n.labels.get(names.AGENT_MNNVL_CLIQUE) for n in in_clique):
        return names.AGENT_MNNVL_CLIQUE
    return names.GFD_CLIQUE


def _summarise(rejected: Sequence[tuple[str, str]], limit: int = 8) -> str:
    shown = "; ".join(f"{name}: {why}" for name, why in rejected[:limit])
    if len(rejected) > limit:
        counts = Counter(why.split(" (")[0] for _, why in rejected[limit:])
        shown += (
            f"; and {len(rejected) - limit} more ("
            + ", ".join(f"{n}x {why}" for why, n in counts.most_common(3))
            + ")"
        )
    return shown
