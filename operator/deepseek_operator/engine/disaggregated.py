"""The decision for a disaggregated serving: one full decision per role, then the pair.

Each role's projected spec (:meth:`~deepseek_operator.api.spec.DeepSeekServingSpec.for_role`)
gets today's whole decision (:func:`.decision.resolve`: ``auto`` with every guard, explicit
backends checked, sequence parallelism, NVLink / clique placement, capacity) against the same
inventory, plus the KV-transfer refusals of :mod:`.kv_transfer_checks`. The MoE backend is not in
vLLM's NIXL compatibility hash, so the roles may decide differently; what the hash covers is
shared by construction (api/roles.py).

The pair adds one informational check to both roles, ``KVTransferPath``: whether some NVLink
clique has eligible nodes of both roles (KV blocks can then move over multi-node NVLink) or the
transfer goes over RDMA (UCX ``rc``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from deepseek_operator.api.roles import KV_ROLES, ROLE_KINDS
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.engine.checks import CheckCategory, CheckResult, check, short_list
from deepseek_operator.engine.cluster_apis import ClusterApis
from deepseek_operator.engine.decision import resolve
from deepseek_operator.engine.resolution import KVTransfer, Resolution
from deepseek_operator.engine.stability import PreviousDecision
from deepseek_operator.nodes.facts import NodeInventory

Memo = Callable[[Hashable, Callable[[], Any]], Any]
"""``memo(key, compute)``: the inventory's memo (the same decision is computed once)."""


@dataclass(frozen=True)
class RoleDecision:
    """One role's decision: its kind, the spec it runs (projected) and the resolution."""

    role: str
    spec: DeepSeekServingSpec
    resolution: Resolution


def _cliques(inventory: NodeInventory, res: Resolution) -> set[str]:
    """The NVLink cliques of the role's eligible nodes."""
    out = set()
    for name in res.eligible_nodes:
        facts = inventory.named(name)
        if facts is not None and facts.clique:
            out.add(facts.clique)
    return out


def transfer_path(shared: set[str], placeable: bool) -> CheckResult:
    """Informational: does KV transfer stay inside an NVLink clique, or go over RDMA?"""
    if shared:
        message = (
            "prefill and decode have eligible nodes in the NVLink clique(s) "
            f"{short_list(sorted(shared))}: KV blocks can move over multi-node NVLink "
            "(UCX cuda_ipc, UCX_CUDA_IPC_ENABLE_MNNVL=y), RDMA (UCX rc) otherwise"
        )
        return check("KVTransferPath", CheckCategory.INFO, "", passed=True, message=message)
    message = (
        "no NVLink clique has eligible nodes of both roles"
        + ("" if placeable else " (a role has no eligible node)")
        + ": KV blocks move over RDMA (UCX rc); without rc in UCX_TLS NIXL would fall back to "
        "TCP"
    )
    return check("KVTransferPath", CheckCategory.INFO, "", passed=False, message=message)


def resolve_roles(
    spec: DeepSeekServingSpec,
    inventory: NodeInventory,
    previous: Mapping[str, PreviousDecision],
    apis: ClusterApis | None,
    memo: Memo | None = None,
) -> tuple[RoleDecision, ...]:
    """Every role's decision for disaggregated ``spec``, in :data:`ROLE_KINDS` order.

    ``previous``: the decision running for each role (stability per role); ``memo``: shares a
    role's decision between reconciles on the same inventory (default: none).
    """
    assert spec.disaggregation is not None
    connector = spec.disaggregation.kv_connector
    decided = []
    for kind in ROLE_KINDS:
        role_spec = spec.for_role(kind)
        kv_role = KV_ROLES[kind]
        prev = previous.get(kind)

        def compute(s: DeepSeekServingSpec = role_spec, r: str = kv_role, p: Any = prev) -> Any:
            return resolve(s, inventory, p, apis, kv_role=r)

        key = ("resolve", role_spec.model_dump_json(), prev, apis, kv_role)
        res: Resolution = memo(key, compute) if memo else compute()
        decided.append(RoleDecision(kind, role_spec, res))
    cliques = [_cliques(inventory, d.resolution) for d in decided]
    shared = set.intersection(*cliques) if cliques else set()
    path = transfer_path(shared, all(d.resolution.placement.placeable for d in decided))
    out = []
    for d in decided:
        transfer = KVTransfer(
            kv_role=KV_ROLES[d.role], connector=connector, role=d.role, nvlink=bool(shared)
        )
        res = dataclasses.replace(
            d.resolution, checks=(*d.resolution.checks, path), kv_transfer=transfer
        )
        out.append(dataclasses.replace(d, resolution=res))
    return tuple(out)
