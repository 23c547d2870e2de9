"""Node affinity for a decision: exactly the nodes :class:`NodeRequirement` admits.

The terms are generated from the precedence table of :mod:`deepseek_operator.nodes.precedence`,
the same table :func:`~deepseek_operator.nodes.facts.node_facts` reads nodes with: the agent's
``sm-family`` label, else GFD's ``compute.major``, else the exact product; the agent's
``nvlink.fully-connected`` label, else an NVSwitch/NVL-tray product. The term lists are built
from static data only, so node churn never changes a pod template (and never restarts a serving
pod). :func:`node_matches` evaluates terms the way the scheduler does, for tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from deepseek_operator.engine.placement import CC10_PLUS_FAMILIES, NodeRequirement, Requirement
from deepseek_operator.names import (
    AGENT_MNNVL_STATE,
    LWS_GROUP_KEY_LABEL,
    LWS_NAME_LABEL,
    MNNVL_STATE_READY,
    UNRUNNABLE_KEY,
)
from deepseek_operator.nodes.facts import SM100
from deepseek_operator.nodes.precedence import (
    COMPUTE,
    MEMORY_MIB,
    NVLINK,
    Expr,
    Fact,
    Term,
    label_absent,
    label_in,
    parse_gt_int,
)

WantedT = TypeVar("WantedT")


def _conjoin(left: Term, right: Term) -> Term | None:
    """AND two terms; two ``In`` sets on one key intersect (None when the result is empty)."""
    merged: dict[tuple[str, str], Expr] = {}
    for expr in left + right:
        key = (expr["key"], expr["operator"])
        if key in merged and expr["operator"] == "In":
            values = [v for v in merged[key]["values"] if v in expr["values"]]
            if not values:
                return None
            merged[key] = label_in(expr["key"], values)
        else:
            merged[key] = expr
    return list(merged.values())


def _product(left: list[Term], right: list[Term]) -> list[Term]:
    """AND of two ORed term lists, dropping contradictions."""
    terms = []
    for a in left:
        for b in right:
            joined = _conjoin(a, b)
            if joined is not None:
                terms.append(joined)
    return terms


def _terms(fact: Fact[Any, WantedT], wanted: WantedT, dra: bool) -> list[Term]:
    return fact.dra_terms(wanted) if dra else fact.terms(wanted)


def _kind_terms(kind: Requirement, dra: bool) -> list[Term] | None:
    if kind is Requirement.ANY_GPU:
        return None
    if kind is Requirement.CC_AT_LEAST_10:
        return _terms(COMPUTE, CC10_PLUS_FAMILIES, dra)
    sm100 = _terms(COMPUTE, [SM100], dra)
    if kind is Requirement.SM100:
        return sm100
    return _product(sm100, _terms(NVLINK, True, dra))


def affinity_terms(requirement: NodeRequirement, dra: bool = False) -> list[Term] | None:
    """``nodeSelectorTerms`` (ORed) for ``requirement``; None when any GPU node will do.

    ``dra``: the pods claim GPUs through DRA, so a fact DRA states is the claim's CEL selectors'
    to check (render/claims.py) and only the labels that outrank DRA keep affinity terms.
    """
    if requirement.kind is Requirement.NONE:
        return [[label_in(UNRUNNABLE_KEY, [requirement.reason or "unknown"])]]
    terms = _kind_terms(requirement.kind, dra)
    if requirement.min_gpu_memory_mib:
        memory = _terms(MEMORY_MIB, requirement.min_gpu_memory_mib, dra)
        terms = memory if terms is None else _product(terms, memory)
    if requirement.clique_key is not None:
        clique = clique_terms(requirement.clique_key)
        terms = clique if terms is None else _product(terms, clique)
    return terms


def clique_terms(clique_key: str) -> list[Term]:
    """Nodes in a usable NVLink clique: the clique label set, and no agent fabric state other
    than ``ready`` (as :func:`~deepseek_operator.nodes.facts.fabric_usable`)."""
    present = {"key": clique_key, "operator": "Exists"}
    return [
        [present, label_in(AGENT_MNNVL_STATE, [MNNVL_STATE_READY])],
        [present, label_absent(AGENT_MNNVL_STATE)],
    ]


def group_affinity(lws_name: str, clique_key: str) -> dict[str, Any]:
    """Pod affinity keeping every pod of one LeaderWorkerSet group in one NVLink clique.

    Required: affinity to the pods of the same group (``matchLabelKeys`` merges the pod's own
    ``group-key`` label, which LWS's webhook sets at creation) with the clique label as topology
    key. Preferred: anti-affinity to the other groups' pods (``mismatchLabelKeys``), so a new
    group's leader picks a clique no other group uses when there is one. Several groups may
    share a clique: LWS's ``exclusive-topology`` would give every group a whole NVL72 rack.
    """
    same_set = {"matchLabels": {LWS_NAME_LABEL: lws_name}}
    return {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": same_set,
                    "matchLabelKeys": [LWS_GROUP_KEY_LABEL],
                    "topologyKey": clique_key,
                }
            ]
        },
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": same_set,
                        "mismatchLabelKeys": [LWS_GROUP_KEY_LABEL],
                        "topologyKey": clique_key,
                    },
                }
            ]
        },
    }


def node_affinity(requirement: NodeRequirement, dra: bool = False) -> dict[str, Any] | None:
    """A pod ``affinity`` object pinning to the requirement's nodes, or None."""
    terms = affinity_terms(requirement, dra)
    if terms is None:
        return None
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]
            }
        }
    }


def _expr_matches(labels: Mapping[str, str], expr: Expr) -> bool:
    key, op = expr["key"], expr["operator"]
    if op == "In":
        return key in labels and labels[key] in expr["values"]
    if op == "NotIn":
        return key not in labels or labels[key] not in expr["values"]
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        # As the scheduler parses them (Go's ParseInt): " 10" or "1_0" match nothing.
        value = parse_gt_int(labels[key]) if key in labels else None
        bound = parse_gt_int(str(expr["values"][0]))
        if value is None or bound is None:
            return False
        return value > bound if op == "Gt" else value < bound
    raise ValueError(f"unsupported operator {op}")


def node_matches(labels: Mapping[str, str], terms: list[Term] | None) -> bool:
    """Whether a node with ``labels`` satisfies ``terms`` (ORed terms of ANDed expressions)."""
    if terms is None:
        return True
    return any(all(_expr_matches(labels, e) for e in term) for term in terms)
