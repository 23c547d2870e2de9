"""Nodes → :class:`NodeFacts` for the event loop, through a :class:`ListWatch` of Nodes.

Each Node is turned into facts once, in the watch thread; the loop receives one snapshot, then
one call per event, and a heartbeat costs one comparison (see :mod:`.node_tracker`). Not a kopf
index, whose initial listing costs O(nodes²) (see :mod:`.list_watch`).
"""

from __future__ import annotations

from typing import Any

from deepseek_operator.controller.node_tracker import fingerprint
from deepseek_operator.nodes.facts import NodeFacts, node_facts

NODES_PATH = "/api/v1/nodes"


def facts_of(node: dict[str, Any]) -> NodeFacts:
    """The facts the operator keeps of one Node object."""
    return fingerprint(node_facts(node))
