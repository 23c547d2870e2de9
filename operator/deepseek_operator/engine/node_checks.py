"""Checks on the candidate nodes: GPU architecture, NVLink, memory fit and capacity."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deepseek_operator.engine.checks import (
    CheckCategory,
    CheckResult,
    check,
    describe_products,
    evidence_counts,
    short_list,
)
from deepseek_operator.engine.model_facts import ModelFacts
from deepseek_operator.engine.placement import NodeRequirement, Placement, memory_shortfall
from deepseek_operator.names import LWS_INSTALL_HINT
from deepseek_operator.nodes.facts import NodeFacts
from deepseek_operator.nodes.precedence import NVLINK, Fact

NODES = CheckCategory.NODES


def gpu_architecture(
    candidates: Sequence[NodeFacts],
    rule: str,
    vllm_msg: str = "",
    excluded: Sequence[tuple[str, str]] = (),
) -> CheckResult:
    """R3 / A4: some candidate node is SM100 (compute capability major 10).

    ``excluded``: GPU-labelled nodes that are no candidates, named when there is no candidate.
    """
    sm100 = [n for n in candidates if n.is_sm100]
    if not candidates:
        named = "; ".join(f"{name}: {why}" for name, why in excluded[:8])
        more = f"; and {len(excluded) - 8} more" if len(excluded) > 8 else ""
        return check(
            "GPUArchitecture",
            NODES,
            rule,
            passed=False,
            message="no candidate GPU nodes"
            + (f" (GPU nodes that are no candidates: {named}{more})" if excluded else "")
            + (f". vLLM: {vllm_msg}" if vllm_msg else ""),
        )
    others = [n for n in candidates if not n.is_sm100]
    message = f"{len(sm100)}/{len(candidates)} candidate nodes are SM100"
    if sm100:
        message += f" ({describe_products(sm100)})"
    if others:
        message += f"; not SM100: {describe_products(others)}"
    if not sm100 and vllm_msg:
        message += f". vLLM: {vllm_msg}"
    return check("GPUArchitecture", NODES, rule, passed=bool(sm100), message=message)


def flashinfer_capability(
    candidates: Sequence[NodeFacts], capabilities: frozenset[tuple[int, int]], backend: str
) -> CheckResult:
    """A9: some candidate node's GPUs have a compute capability the FlashInfer moe_ep kernels take
    (exactly, e.g. 10.0 and 10.3: not every SM100-family part)."""
    shown = ", ".join(f"{m}.{n}" for m, n in sorted(capabilities))
    ok = [n for n in candidates if n.cc is not None and tuple(n.cc) in capabilities]
    vllm = f". vLLM: moe_backend={backend!r} is only supported on compute capability {shown}"
    return check(
        "GPUArchitecture",
        NODES,
        "A9",
        passed=bool(ok),
        message=f"{len(ok)}/{len(candidates)} candidate nodes have compute capability {shown}"
        + ("" if ok else vllm),
    )


def nvlink_fully_connected(
    sm100: Sequence[NodeFacts], placement: Placement, gpus_per_pod: int
) -> CheckResult:
    """R14: the EP group fits in one fully NVLink-connected SM100 node."""
    connected = [n for n in sm100 if n.nvlink_fully_connected]
    fits = placement.eligible
    if not sm100:
        return check(
            "NVLinkFullyConnected",
            NODES,
            "R14",
            passed=False,
            message="no SM100 candidate node to check",
        )
    message = f"{len(connected)}/{len(sm100)} SM100 nodes are fully NVLink-connected"
    if connected:
        message += f" ({evidence_counts(connected, NVLINK)})"
    message += f"; {len(fits)} of them can hold the {gpus_per_pod}-GPU EP group in one node"
    broken = [n for n in sm100 if n.nvlink_fully_connected is False]
    unknown = [n for n in sm100 if n.nvlink_fully_connected is None]
    if broken:
        message += f"; not fully connected: {_named_evidence(broken, NVLINK)}"
    if unknown:
        message += f"; NVLink unknown: {_named_evidence(unknown, NVLINK)}"
    return check("NVLinkFullyConnected", NODES, "R14", passed=bool(fits), message=message)


def _named_evidence(nodes: Sequence[NodeFacts], fact: Fact[Any, Any], limit: int = 5) -> str:
    """'node: <the label that decided> (source); …' for the first ``limit`` of ``nodes``."""
    shown = "; ".join(f"{n.name}: {n.evidence(fact)}" for n in nodes[:limit])
    return shown + (f"; and {len(nodes) - limit} more" if len(nodes) > limit else "")


def as_information(result: CheckResult, note: str) -> CheckResult:
    """``result`` reported but not enforced (category INFO), with ``note`` appended."""
    return CheckResult(
        name=result.name,
        category=CheckCategory.INFO,
        rule=result.rule,
        passed=result.passed,
        message=result.message + note,
    )


def not_eligible_note(sm100: Sequence[NodeFacts], placement: Placement) -> str:
    """'; SM100 nodes not eligible: …' for the SM100 nodes the placement left out."""
    eligible = set(placement.eligible)
    left_out = [n.name for n in sm100 if n.name not in eligible]
    return f"; SM100 nodes not eligible: {short_list(left_out)}" if left_out else ""


def gpu_memory(
    candidates: Sequence[NodeFacts],
    requirement: NodeRequirement,
    facts: ModelFacts,
    gpus_per_replica: int,
) -> CheckResult:
    """The checkpoint's per-GPU memory need fits some candidate node (``requirement`` carries it)."""
    minimum = requirement.min_gpu_memory_mib
    if not minimum:
        return check(
            "GPUMemory",
            CheckCategory.FIT,
            "",
            passed=True,
            message="no GPU memory minimum known for this checkpoint (spec.model.vramMinimumGB)",
        )
    fits = [n for n in candidates if requirement.admits(n)]
    unknown = [n.name for n in fits if n.gpu_memory_mib is None]
    message = (
        f"{len(fits)}/{len(candidates)} candidate nodes have at least {minimum} MiB per GPU "
        f"({facts.vram_minimum_gb} GB for the replica over {gpus_per_replica} GPUs, "
        f"{facts.source('vram_minimum_gb')})"
    )
    if unknown:
        message += f"; memory unknown (no label), admitted: {short_list(unknown)}"
    short = [n for n in candidates if not requirement.admits(n)]
    if short:
        shown = "; ".join(f"{n.name}: {memory_shortfall(n, minimum)}" for n in short[:3])
        more = f"; and {len(short) - 3} more" if len(short) > 3 else ""
        message += f"; kept out: {shown}{more}"
    return check("GPUMemory", CheckCategory.FIT, "", passed=bool(fits), message=message)


def capacity(placement: Placement, replicas: int, name: str = "Capacity") -> CheckResult:
    """The eligible nodes hold every replica."""
    return check(
        name,
        CheckCategory.PLACEMENT,
        "",
        passed=placement.placeable,
        message=f"eligible nodes hold {placement.capacity} replica(s) of {placement.gpus_per_pod} GPUs; {replicas} wanted",
    )


def nvlink_clique(placement: Placement, clique_key: str | None, rule: str) -> CheckResult:
    """A multi-node group fits in one NVLink clique (GB200/GB300 NVL72 trays).

    vLLM's symmetric-memory all-to-all (MegaMoE) needs NVLink between every rank of the EP group,
    across trays only within one multi-node NVLink clique (docs/decision-rules.md).
    """
    group = f"{placement.pods_per_replica}-pod group of {placement.gpus_per_pod}-GPU pods"
    if clique_key is None:
        return check(
            "NVLinkClique",
            NODES,
            rule,
            passed=False,
            message=f"no candidate node is in a usable NVLink clique (no nvidia.com/gpu.clique or agent "
            f"mnnvl.clique label with a ready fabric), so a {group} cannot share NVLink",
        )
    holding = [c for c in placement.cliques if c.groups > 0]
    others = [c for c in placement.cliques if c.groups == 0]
    message = (
        f"{len(holding)} NVLink clique(s) can hold a {group}"
        + (": " + "; ".join(c.describe() for c in holding) if holding else "")
        + (
            "; too small: " + "; ".join(f"{c.clique}: {c.pods} pod(s)" for c in others)
            if others
            else ""
        )
    )
    return check("NVLinkClique", NODES, rule, passed=bool(holding), message=message)


def leader_worker_set(installed: bool, pods_per_replica: int) -> CheckResult:
    """A multi-pod replica needs the LeaderWorkerSet API on the cluster."""
    if installed:
        return check(
            "LeaderWorkerSet",
            CheckCategory.PLACEMENT,
            "",
            passed=True,
            message=f"LeaderWorkerSet is served: one group of {pods_per_replica} pods per replica",
        )
    return check(
        "LeaderWorkerSet",
        CheckCategory.PLACEMENT,
        "",
        passed=False,
        message=f"a replica spans {pods_per_replica} pods, which needs a LeaderWorkerSet "
        f"(leaderworkerset.x-k8s.io/v1), and the cluster does not serve that API: "
        f"{LWS_INSTALL_HINT}",
    )
