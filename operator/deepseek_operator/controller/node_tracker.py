"""The node facts the operator has acted on, and the inventory built from the node index.

kopf's node index (a pure function of each Node) holds the latest facts; the tracker remembers
the facts each Node had when the operator last reacted to it, so a Node event yields a
:class:`NodeChange` only when something the decision reads changed (labels, taints, readiness,
allocatable GPUs; never a heartbeat).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from deepseek_operator.names import GFD_TIMESTAMP
from deepseek_operator.nodes.facts import NodeFacts, NodeInventory

# Labels rewritten on every pass of their producer that carry no GPU fact.
IGNORED_NODE_LABELS = (GFD_TIMESTAMP,)


def fingerprint(facts: NodeFacts) -> NodeFacts:
    """``facts`` without the labels that change on every pass, so equal facts compare equal."""
    labels = {k: v for k, v in facts.labels.items() if k not in IGNORED_NODE_LABELS}
    return dataclasses.replace(facts, labels=labels)


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
    """Node facts last acted on, and a cached inventory of the node index."""

    def __init__(self) -> None:
        self._acted: dict[str, NodeFacts] = {}
        self._version = 0  # bumped on every change: the inventory cache key
        self._inventory: tuple[tuple[int, int], NodeInventory] | None = None

    def __len__(self) -> int:
        return len(self._acted)

    def observe(self, name: str, facts: NodeFacts | None) -> NodeChange | None:
        """Record a Node's current facts (None once deleted); the change, or None if nothing did."""
        before = self._acted.get(name)
        if facts is None:
            self._acted.pop(name, None)
        elif before == facts:
            return None
        else:
            self._acted[name] = facts
        self._version += 1
        return NodeChange(before, facts)

    def inventory(self, index: Mapping[str, Iterable[NodeFacts]]) -> NodeInventory:
        """The inventory of ``index``, rebuilt only after a change or when Nodes come or go."""
        key = (self._version, len(index))
        if self._inventory is None or self._inventory[0] != key:
            nodes = [facts for name in index for facts in index[name]]
            self._inventory = (key, NodeInventory(tuple(sorted(nodes, key=lambda n: n.name))))
        return self._inventory[1]
