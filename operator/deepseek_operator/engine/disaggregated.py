"""The decision for a disaggregated serving: one full decision per role, then the pair.

Each role's projected spec (:meth:`~deepseek_operator.api.spec.DeepSeekServingSpec.for_role`)
gets today's whole decision (:func:`.decision.resolve`: ``auto`` with every guard, explicit
backends checked, sequence parallelism, NVLink / clique placement, capacity) against the same
inventory, plus the KV-transfer refusals of :mod:`.kv_transfer_checks`. The MoE backend is not in
vLLM's NIXL compatibility hash, so the roles may decide differently; what the hash covers is
shared by construction (api/roles.py).

The pair adds three checks to both roles: ``KVTransferPath`` (informational), whether some NVLink
clique has eligible nodes of both roles (KV blocks can then move over multi-node NVLink) or the
transfer goes over RDMA (UCX ``rc``), status only: what a role's pods render depends on that
role's own spec and nodes, so an edit of one role never rolls the other's pool;
``RolesFitTogether``, whether the eligible nodes hold both pools at once (each role's own
capacity counts the nodes as if it were alone): when they do not, both roles are not placeable,
with that reason; and ``RolesOneGPUGeneration``, whether every eligible node of both roles is of
one GPU generation (SM family). vLLM picks the attention backend per compute capability, and its
name is a factor of the NIXL compatibility hash, so a prefill pool on SM100 and a decode pool on
SM90 would refuse each other at the handshake after both loaded their weights: such a pair, or
one whose pools could land on two generations, is not placeable either, and the message says
which role may land where.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deepseek_operator.api.roles import KV_ROLES, ROLE_KINDS
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.engine.checks import CheckCategory, CheckResult, check, short_list
from deepseek_operator.engine.cluster_apis import ClusterApis
from deepseek_operator.engine.decision import resolve
from deepseek_operator.engine.resolution import KVTransfer, Resolution
from deepseek_operator.engine.stability import PreviousDecision
from deepseek_operator.names import REASON_INSUFFICIENT_NODES
from deepseek_operator.nodes.claims import ClaimOwner
from deepseek_operator.nodes.facts import NodeInventory

ROLES_FIT_TOGETHER = "RolesFitTogether"
"""The check that both pools fit on the eligible nodes at once."""
ROLES_ONE_GENERATION = "RolesOneGPUGeneration"
"""The check that both pools' eligible nodes are of one GPU generation."""
# The pair checks whose failure holds the pair (render refuses it, the operator creates neither).
_PAIR_PLACEMENT = (ROLES_ONE_GENERATION, ROLES_FIT_TOGETHER)

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


def _fit_together(
    inventory: NodeInventory,
    decided: list[RoleDecision],
    resource: str,
    owner: ClaimOwner | None = None,
) -> dict[str, tuple[int, int]]:
    """Pods of each role placed when both pools share the nodes: (placed, wanted) per role.

    Best fit, the role with fewer eligible nodes first. Clique confinement of multi-pod groups
    is each role's own placement's to check; this one asks only whether the GPUs suffice.
    """
    free: dict[str, int] = {}
    out: dict[str, tuple[int, int]] = {}
    for d in sorted(decided, key=lambda d: len(d.resolution.eligible_nodes)):
        res = d.resolution
        wanted, placed = res.replicas * res.pods_per_replica, 0
        for _ in range(wanted):
            fits = []
            for name in res.eligible_nodes:
                if name not in free:
                    facts = inventory.named(name)
                    free[name] = facts.free_gpus(resource, owner) if facts else 0
                if free[name] >= res.gpus_per_pod:
                    fits.append(name)
            if not fits:
                break
            best = min(fits, key=lambda n: (free[n], n))
            free[best] -= res.gpus_per_pod
            placed += 1
        out[d.role] = (placed, wanted)
    return out


def fit_together(
    inventory: NodeInventory,
    decided: list[RoleDecision],
    resource: str,
    owner: ClaimOwner | None = None,
) -> CheckResult:
    """Both pools fit on the eligible nodes at once (each role's own Capacity counts it alone;
    on DRA nodes, devices that claims of ``owner``'s pods hold are free for both)."""
    fit = _fit_together(inventory, decided, resource, owner)
    parts = ", ".join(
        f"{d.role} {fit[d.role][0]}/{fit[d.role][1]} pod(s) of {d.resolution.gpus_per_pod} GPUs"
        for d in decided
    )
    ok = all(placed == wanted for placed, wanted in fit.values())
    message = (
        f"both pools fit on the eligible nodes together: {parts}"
        if ok
        else f"the eligible nodes hold each pool alone but not both together: {parts} placed; "
        "add nodes, or fewer replicas or GPUs in a role"
    )
    return check(ROLES_FIT_TOGETHER, CheckCategory.PLACEMENT, "", passed=ok, message=message)


def one_generation(inventory: NodeInventory, decided: Sequence[RoleDecision]) -> CheckResult:
    """Both roles' eligible nodes are of one GPU generation (SM family, hence one attention
    backend in the NIXL compatibility hash)."""
    families: dict[str, dict[str, list[str]]] = {}  # role -> family -> nodes
    for d in decided:
        for name in d.resolution.eligible_nodes:
            facts = inventory.named(name)
            family = (facts.family if facts else None) or "unknown"
            families.setdefault(d.role, {}).setdefault(family, []).append(name)
    every = sorted({f for per_role in families.values() for f in per_role})
    parts = "; ".join(
        f"{d.role} on "
        + ", ".join(
            f"{family} ({short_list(nodes)})"
            for family, nodes in sorted(families.get(d.role, {}).items())
        )
        for d in decided
    )
    if len(every) <= 1:
        message = f"both roles run on one GPU generation ({every[0] if every else 'none'})"
        return check(
            ROLES_ONE_GENERATION, CheckCategory.PLACEMENT, "", passed=True, message=message
        )
    message = (
        f"the eligible nodes span GPU generations {', '.join(every)}: {parts}. vLLM picks the "
        "attention backend per GPU generation and hashes its name into the NIXL compatibility "
        "hash, so a prefill and a decode pool on different generations refuse each other at the "
        "handshake; keep both roles on one generation (spec.nodeSelector, e.g. "
        "nvidia.com/gpu.family or nvidia.com/gpu.product, or each role's layout)"
    )
    return check(ROLES_ONE_GENERATION, CheckCategory.PLACEMENT, "", passed=False, message=message)


def apart(decided: Sequence[RoleDecision]) -> CheckResult | None:
    """The failed pair check (``RolesOneGPUGeneration``, ``RolesFitTogether``) of a pair that
    cannot be placed as one, or None.

    ``render`` refuses such a pair and the operator creates neither role (the same verdict on
    the same inventory): one pool started alone, or beside a peer it cannot talk to, would load
    weights for nothing.
    """
    failed = {c.name: c for d in decided for c in d.resolution.checks if c.name in _PAIR_PLACEMENT}
    return next((failed[n] for n in _PAIR_PLACEMENT if n in failed and not failed[n].passed), None)


def inference_pool_check(spec: DeepSeekServingSpec, apis: ClusterApis) -> CheckResult | None:
    """Informational, with an endpoint picker: is the InferencePool written (its CRD served)?"""
    d = spec.disaggregation
    if d is None or d.endpoint_picker is None:
        return None
    if apis.inference_pool:
        message = (
            f"InferencePool over both roles' HTTP pods, endpoint picker "
            f"{d.endpoint_picker.name}:{d.endpoint_picker.port}"
        )
    else:
        message = (
            "the cluster does not serve inference.networking.k8s.io/v1 InferencePool: install "
            "the Gateway API Inference Extension CRDs for the operator to write it"
        )
    return check(
        "InferencePool", CheckCategory.INFO, "", passed=apis.inference_pool, message=message
    )


def resolve_roles(
    spec: DeepSeekServingSpec,
    inventory: NodeInventory,
    previous: Mapping[str, PreviousDecision],
    apis: ClusterApis | None,
    memo: Memo | None = None,
    owner: ClaimOwner | None = None,
) -> tuple[RoleDecision, ...]:
    """Every role's decision for disaggregated ``spec``, in :data:`ROLE_KINDS` order.

    ``previous``: the decision running for each role (stability per role); ``memo``: shares a
    role's decision between reconciles on the same inventory (default: none); ``owner``:
    both roles' workloads, whose pods' claims hold DRA devices free for this serving.
    """
    assert spec.disaggregation is not None
    connector = spec.disaggregation.kv_connector
    decided = []
    for kind in ROLE_KINDS:
        role_spec = spec.for_role(kind)
        kv_role = KV_ROLES[kind]
        prev = previous.get(kind)

        def compute(s: DeepSeekServingSpec = role_spec, r: str = kv_role, p: Any = prev) -> Any:
            return resolve(s, inventory, p, apis, kv_role=r, owner=owner)

        held = inventory.claim_key(owner)
        key = ("resolve", role_spec.model_dump_json(), prev, apis, kv_role, held)
        res: Resolution = memo(key, compute) if memo else compute()
        decided.append(RoleDecision(kind, role_spec, res))
    cliques = [_cliques(inventory, d.resolution) for d in decided]
    shared = set.intersection(*cliques) if cliques else set()
    placeable = all(d.resolution.placement.placeable for d in decided)
    path = transfer_path(shared, placeable)
    routing = inference_pool_check(spec, apis or ClusterApis())
    pair = (
        (
            one_generation(inventory, decided),
            fit_together(inventory, decided, spec.gpu_resource_name, owner),
        )
        if placeable
        else ()
    )
    failed = next((c for c in pair if not c.passed), None)
    out = []
    for d, own in zip(decided, cliques, strict=True):
        # The pod template reads the role's own cliques only; ``shared`` (both roles') is for
        # the status: a decode-only edit must never rewrite the prefill pods.
        transfer = KVTransfer(
            kv_role=KV_ROLES[d.role], connector=connector, role=d.role, own_clique=bool(own)
        )
        placement = d.resolution.placement
        checks = (*d.resolution.checks, path, *([routing] if routing else []))
        checks = (*checks, *pair)
        if failed is not None:
            placement = dataclasses.replace(
                placement,
                placeable=False,
                reason=REASON_INSUFFICIENT_NODES,
                message=failed.message,
            )
        res = dataclasses.replace(
            d.resolution, checks=checks, kv_transfer=transfer, placement=placement
        )
        out.append(dataclasses.replace(d, resolution=res))
    return tuple(out)
