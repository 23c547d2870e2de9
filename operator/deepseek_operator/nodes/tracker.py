"""The operator's node index: each Node's facts as last seen, and the inventory built from them.

Pure: the controller gathers the events (:mod:`deepseek_operator.controller.node_events`) and
hands them here. :func:`~.facts.facts_of` turns each Node into facts once, in the watch thread;
the tracker receives one listing, then one event at a time (a Node watch, not a kopf index,
whose initial listing costs O(nodes²): see :mod:`deepseek_operator.kube.list_watch`).
A Node event yields a :class:`NodeChange` only when something the decision reads changed (labels,
taints, readiness, allocatable GPUs; never a heartbeat). Every event costs O(1): one dict lookup
and one comparison; the sorted inventory is rebuilt lazily, at most once per batch of changes,
when a reconcile asks for it (``inventory_builds`` counts them, for the regression test).

``gpu.nvidia.com`` ResourceSlices are kept beside the Nodes, as they change apart from them, and
merged into the facts of their node when the inventory is built (:mod:`.dra` reads them).
ResourceClaims that hold ``gpu.nvidia.com`` devices are kept the same way (reduced to those
devices, :mod:`.claims`): a held device is not free for any serving but the claim's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from deepseek_operator.nodes.claims import held_devices
from deepseek_operator.nodes.dra import read_slices, slice_node, with_claims
from deepseek_operator.nodes.facts import NodeFacts, NodeInventory, with_dra

_V = TypeVar("_V", NodeFacts, dict[str, Any])


def _put(store: dict[str, _V], key: str, item: _V | None) -> tuple[bool, _V | None]:
    """Record ``item`` under ``key`` in ``store`` (None: drop it); whether anything changed,
    and what was there before."""
    before = store.get(key)
    if item is None:
        if before is None:
            return False, None
        del store[key]
    elif before == item:
        return False, before
    else:
        store[key] = item
    return True, before


def _selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@dataclass(frozen=True)
class NodeChange:
    """A Node's facts before and after an event (None: the Node did not exist)."""

    before: NodeFacts | None
    after: NodeFacts | None

    def may_affect(self, node_selector: Mapping[str, str]) -> bool:
        """Whether a DeepSeekServing with ``node_selector`` could see this node before or after."""
        before = self.before.labels if self.before else {}
        after = self.after.labels if self.after else {}
        return _selector_matches(node_selector, before) or _selector_matches(node_selector, after)


class NodeTracker:
    """Node name → facts, and a cached inventory of them."""

    def __init__(self) -> None:
        self._facts: dict[str, NodeFacts] = {}
        self._inventory: NodeInventory | None = None  # None: stale since the last change
        self._slices: dict[str, dict[str, Any]] = {}  # gpu.nvidia.com ResourceSlices by name
        self._claims: dict[str, dict[str, Any]] = {}  # claims holding GPU devices, by key
        self._pool_nodes: dict[str, set[str | None]] | None = None  # None: stale
        self.inventory_builds = 0

    def __len__(self) -> int:
        return len(self._facts)

    def observe(self, name: str, facts: NodeFacts | None) -> NodeChange | None:
        """Record a Node's current facts (None once deleted); the change, or None if nothing did."""
        changed, before = _put(self._facts, name, facts)
        if not changed:
            return None
        self._inventory = None
        return NodeChange(before, facts)

    def replace_all(self, listed: Mapping[str, NodeFacts]) -> list[NodeChange]:
        """Take a full listing as the truth (start, or a watch that expired); what changed."""
        changes = [
            NodeChange(before, None) for name, before in self._facts.items() if name not in listed
        ]
        changes += [
            NodeChange(self._facts.get(name), facts)
            for name, facts in listed.items()
            if self._facts.get(name) != facts
        ]
        self._facts = dict(listed)
        if changes:
            self._inventory = None
        return changes

    def observe_slice(self, name: str, item: dict[str, Any] | None) -> list[NodeChange]:
        """Record a ResourceSlice (None once deleted, or not a GPU slice); a change of the node
        it names (before or after), so the DeepSeekServings that may see that node re-decide."""
        changed, before = _put(self._slices, name, item)
        if not changed:
            return []
        self._inventory = self._pool_nodes = None
        return self._node_changes({slice_node(before), slice_node(item)})

    def replace_slices(self, listed: Mapping[str, dict[str, Any] | None]) -> list[NodeChange]:
        """Take a full ResourceSlice listing as the truth; the changes of the nodes it touches."""
        kept = {name: item for name, item in listed.items() if item is not None}
        if kept == self._slices:
            return []
        touched = {slice_node(i) for i in (*self._slices.values(), *kept.values())}
        self._slices = kept
        self._inventory = self._pool_nodes = None
        return self._node_changes(touched)

    def observe_claim(self, key: str, item: dict[str, Any] | None) -> list[NodeChange]:
        """Record a ResourceClaim (None once deleted, or holding no GPU device); a change of the
        nodes whose devices it holds (before or after)."""
        changed, before = _put(self._claims, key, item)
        if not changed:
            return []
        self._inventory = None
        return self._node_changes(self._claim_nodes([before, item]))

    def replace_claims(self, listed: Mapping[str, dict[str, Any] | None]) -> list[NodeChange]:
        """Take a full ResourceClaim listing as the truth; the changes of the nodes it touches."""
        kept = {key: item for key, item in listed.items() if item is not None}
        if kept == self._claims:
            return []
        touched = self._claim_nodes([*self._claims.values(), *kept.values()])
        self._claims = kept
        self._inventory = None
        return self._node_changes(touched)

    def _claim_nodes(self, claims: list[dict[str, Any] | None]) -> set[str | None]:
        """The nodes whose slices publish the pools the claims' devices come from."""
        if self._pool_nodes is None:  # pool -> nodes, rebuilt after a slice change
            self._pool_nodes = {}
            for item in self._slices.values():
                spec = item.get("spec")
                pool = spec.get("pool") if isinstance(spec, dict) else None
                if isinstance(pool, dict) and isinstance(pool.get("name"), str):
                    self._pool_nodes.setdefault(pool["name"], set()).add(slice_node(item))
        pools = {d.get("pool") for c in claims if c for d in c.get("devices", ())}
        return {n for p in pools if isinstance(p, str) for n in self._pool_nodes.get(p, ())}

    def _node_changes(self, names: set[str | None]) -> list[NodeChange]:
        # The label-only facts stand for the node: may_affect reads labels, which slices never
        # change; the merged facts are the inventory's.
        return [
            NodeChange(f, f) for n in sorted(x for x in names if x) if (f := self._facts.get(n))
        ]

    def inventory(self) -> NodeInventory:
        """Every known Node's facts, merged with their GPU ResourceSlices, sorted by name
        (rebuilt only after a change)."""
        if self._inventory is None:
            self.inventory_builds += 1
            nodes = sorted(self._facts.values(), key=lambda n: n.name)
            if not self._slices:
                self._inventory = NodeInventory(tuple(nodes))
            else:
                dra = read_slices(self._slices.values(), (n.name for n in nodes))
                dra = with_claims(dra, held_devices(self._claims.values()))
                merged = tuple(with_dra(n, dra.by_node.get(n.name)) for n in nodes)
                self._inventory = NodeInventory(merged, dra.problems)
        return self._inventory
