"""The parts of a plan's status that are the plan's own: each LeaderWorkerSet group's pods and
NVLink clique, and the status of a spec that breaks a static rule.

The rest of the status (conditions, decision, capacity, router, weights) is rendered by
:mod:`deepseek_operator.render`; :func:`~deepseek_operator.plan.plan` composes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deepseek_operator.api.status import GroupStatus
from deepseek_operator.engine.resolution import Resolution
from deepseek_operator.nodes.facts import NodeInventory
from deepseek_operator.plan.observed import GroupPods, Observed
from deepseek_operator.render.status import invalid_spec_status


def group_statuses(
    res: Resolution, inventory: NodeInventory, groups: Mapping[int, GroupPods]
) -> list[GroupStatus]:
    """Each observed group: leader pod, the NVLink clique of its nodes, nodes, pods ready."""
    out = []
    for index in sorted(groups):
        pods = groups[index]
        nodes = [pods[w].node for w in sorted(pods)]
        cliques = sorted(
            {clique for node in nodes if node and (clique := _clique_of(inventory, node, res))}
        )
        out.append(
            GroupStatus(
                index=index,
                leader_pod=pods[0].name if 0 in pods else "",
                clique=", ".join(cliques) or None,
                nodes=nodes,
                pods_ready=sum(1 for p in pods.values() if p.ready),
                pods_total=res.pods_per_replica,
            )
        )
    return out


def _clique_of(inventory: NodeInventory, node: str, res: Resolution) -> str | None:
    """The NVLink clique of ``node``: the value of the label groups are confined by, if any."""
    facts = inventory.named(node)
    if facts is None:
        return None
    return facts.labels.get(res.clique_key) if res.clique_key else facts.clique


def invalid_spec_plan_status(observed: Observed, message: str, now: str) -> dict[str, Any]:
    """The status for a spec that breaks a static rule: the last one, with InvalidSpec conditions."""
    return invalid_spec_status(
        observed.raw_status,
        observed.conditions,
        generation=observed.generation,
        message=message,
        now=now,
    )
