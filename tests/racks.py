"""kwok GB200 NVL72 compute trays grouped into NVLink cliques (multi-node NVLink, MNNVL).

A GB200 compute tray is one Node with 4 GPUs. Trays of one NVL72 rack (or one NVLink partition of
it) share a clique, which GPU Feature Discovery publishes as ``nvidia.com/gpu.clique:
<ClusterUUID>.<CliqueId>`` and the node agent as ``gpu.deepseek-operator.io/mnnvl.clique`` with
``mnnvl.state=ready`` (docs/node-facts.md). A tray whose fabric has not completed (Fabric
Manager still initialising) has neither clique label, and the agent says ``mnnvl.state=pending``.

A clique id is unique only together with its cluster UUID (docs/node-facts.md: "clique ID by
itself is not unique"), so :data:`TWO_RACKS` uses the *same* clique id in two clusters on purpose.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deepseek_operator import names
from tests.gpu_nodes import HEALTHY_GB200_AGENT_LABELS, make_gpu_node

GFD_CLIQUE = names.GFD_CLIQUE


@dataclass(frozen=True)
class Clique:
    """One NVLink clique: the Fabric Manager cluster UUID and the clique id within it."""

    cluster_uuid: str
    clique_id: int

    @property
    def key(self) -> str:
        """``<ClusterUUID>.<CliqueId>``, the value of ``nvidia.com/gpu.clique``."""
        return f"{self.cluster_uuid}.{self.clique_id}"


#: Two racks whose cliques have the same id (32766) but different cluster UUIDs.
RACK_A = Clique("7b968a6d-c8aa-45e1-9e07-e1e51be99c31", 32766)
RACK_B = Clique("9c6f5af3-53bf-49b5-a436-b66766c413c3", 32766)
TWO_RACKS = (RACK_A, RACK_B)


def make_gb200_tray(
    name: str,
    clique: Clique | None,
    *,
    fabric: str = "ready",
    gfd_clique: bool = True,
    agent: bool = True,
    allocatable_gpus: int | None = None,
    extra_labels: Mapping[str, str] | None = None,
    kwok: bool = True,
) -> dict[str, Any]:
    """A kwok GB200 compute tray (4 GPUs, arm64) in *clique*.

    *fabric* is the agent's ``mnnvl.state`` (``ready``, ``pending``, ``degraded``, ``none``); the
    clique labels are set only when it is ``ready`` and *clique* is given, as GFD and the agent do.
    ``gfd_clique=False`` leaves out GFD's label (an old GFD, or DRA mode without
    ``GPU_CLIQUE_LABEL_ENABLED``), ``agent=False`` the agent's labels; ``kwok=False`` builds a
    bare Node for unit tests.
    """
    labels = dict(extra_labels or {})
    agent_labels: dict[str, str] = {}
    if agent:
        agent_labels = {**HEALTHY_GB200_AGENT_LABELS, names.AGENT_MNNVL_STATE: fabric}
    if clique is not None and fabric == "ready":
        if gfd_clique:
            labels[GFD_CLIQUE] = clique.key
        if agent:
            agent_labels[names.AGENT_MNNVL_CLIQUE] = clique.key
            agent_labels[names.AGENT_MNNVL_DOMAIN] = clique.cluster_uuid
    return make_gpu_node(
        name,
        product="NVIDIA-GB200",
        agent_labels=agent_labels,
        extra_labels=labels,
        allocatable_gpus=allocatable_gpus,
        kwok=kwok,
    )


def two_racks(prefix: str, trays_per_rack: int = 4) -> list[dict[str, Any]]:
    """``trays_per_rack`` ready trays in each of :data:`TWO_RACKS` plus one tray whose fabric
    has not completed (no clique), named ``<prefix>-a<i>``, ``<prefix>-b<i>``, ``<prefix>-pending``.
    """
    nodes = [
        make_gb200_tray(f"{prefix}-{rack_name}{i}", clique)
        for rack_name, clique in (("a", RACK_A), ("b", RACK_B))
        for i in range(trays_per_rack)
    ]
    nodes.append(make_gb200_tray(f"{prefix}-pending", None, fabric="pending"))
    return nodes
