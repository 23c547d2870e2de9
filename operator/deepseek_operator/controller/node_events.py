"""What a Node, ResourceSlice or ResourceClaim event makes of the operator's state: the node index
(the pure :class:`~deepseek_operator.nodes.tracker.NodeTracker`) updated, and the
DeepSeekServings that may see the changed node re-decided (a mixin of
:class:`~deepseek_operator.controller.state.OperatorState`, kept apart to keep each module small).
"""

from __future__ import annotations

import asyncio
from typing import Any

from deepseek_operator.actions.owned import ServingKey
from deepseek_operator.controller import metrics
from deepseek_operator.controller.records import Records
from deepseek_operator.controller.watches import NODE_DEBOUNCE_S
from deepseek_operator.nodes.facts import NodeFacts
from deepseek_operator.nodes.tracker import NodeChange, NodeTracker


class NodeEvents:
    """Node, ResourceSlice and ResourceClaim events; the state it needs is the OperatorState's own."""

    nodes: NodeTracker
    nodes_listed: asyncio.Event
    records: Records

    def schedule(
        self, key: ServingKey, delay: float, trigger: str, status_only: bool = False
    ) -> None:
        """Reconcile ``key`` later (OperatorState's)."""
        raise NotImplementedError

    def _listed(self, watch: str, changed: set[ServingKey]) -> None:
        raise NotImplementedError

    def node_seen(self, name: str, facts: NodeFacts | None) -> None:
        """One Node event (``facts`` None: deleted)."""
        change = self.nodes.observe(name, facts)
        if change is None:
            return  # a heartbeat or another change the decision does not read
        metrics.NODES.set(len(self.nodes))
        if self.nodes_listed.is_set():
            self.nodes_changed([change])

    def slices_seen(self, watch: str, listed: dict[str, Any]) -> None:
        """A full ResourceSlice listing; reconciles wait for the first one, as for children (a
        DRA-only node seen without its slices has no GPUs, and a first decision sticks)."""
        changes = self.nodes.replace_slices(listed)
        self._listed(watch, set())
        self.nodes_changed(changes if self.nodes_listed.is_set() else [])

    def slice_seen(self, type_: str, name: str, item: dict[str, Any] | None) -> None:
        """One ResourceSlice event (``item`` None: another driver's slice)."""
        self.nodes_changed(self.nodes.observe_slice(name, None if type_ == "DELETED" else item))

    def claims_seen(self, watch: str, listed: dict[str, Any]) -> None:
        """A full ResourceClaim listing; reconciles wait for the first one, as for slices (a
        first decision on devices other claims hold would put pods where they stay Pending)."""
        changes = self.nodes.replace_claims(listed)
        self._listed(watch, set())
        self.nodes_changed(changes if self.nodes_listed.is_set() else [])

    def claim_seen(self, type_: str, key: str, item: dict[str, Any] | None) -> None:
        """One ResourceClaim event (``item`` None: it holds no GPU device)."""
        self.nodes_changed(self.nodes.observe_claim(key, None if type_ == "DELETED" else item))

    def nodes_changed(self, changes: list[NodeChange]) -> None:
        """Re-evaluate the DeepSeekServings these node changes can affect (and only those)."""
        if not changes:
            return
        for key, serving in self.records.bodies():
            if self.records.is_gone(serving.uid):
                continue
            if any(change.may_affect(serving.node_selector) for change in changes):
                self.schedule(key, delay=NODE_DEBOUNCE_S, trigger="nodes")
