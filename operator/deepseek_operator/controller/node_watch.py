"""Nodes → :class:`NodeFacts` for the event loop, through a :class:`ListWatch` of Nodes.

Each Node is turned into facts once, in the watch thread; the loop receives one snapshot, then
one call per event, and a heartbeat costs one comparison (see :mod:`.node_tracker`). Not a kopf
index, whose initial listing costs O(nodes²) (see :mod:`.list_watch`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from deepseek_operator.controller.kube import KubeClient
from deepseek_operator.controller.list_watch import ListWatch
from deepseek_operator.controller.node_tracker import fingerprint
from deepseek_operator.nodes.facts import NodeFacts, node_facts

NODES_PATH = "/api/v1/nodes"


def facts_of(node: dict[str, Any]) -> NodeFacts:
    """The facts the operator keeps of one Node object."""
    return fingerprint(node_facts(node))


def node_watch(
    kube: KubeClient,
    loop: asyncio.AbstractEventLoop,
    on_listed: Callable[[dict[str, NodeFacts]], None],
    on_event: Callable[[str, NodeFacts | None], None],
) -> ListWatch[NodeFacts]:
    """A watch of every Node: ``on_listed(name → facts)``, then ``on_event(name, facts)``
    (``facts`` None: deleted)."""

    def event(kind: str, name: str, facts: NodeFacts) -> None:
        on_event(name, None if kind == "DELETED" else facts)

    return ListWatch(kube, loop, NODES_PATH, facts_of, on_listed, event, name="node-watch")
