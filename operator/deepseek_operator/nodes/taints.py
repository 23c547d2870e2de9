"""Node taints and Kubernetes' toleration matching (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Taint:
    """A node taint."""

    key: str
    value: str
    effect: str


class Tainted(Protocol):
    """Anything that carries node taints (a :class:`~deepseek_operator.nodes.facts.NodeFacts`)."""

    @property
    def taints(self) -> tuple[Taint, ...]:
        """The node's taints."""
        ...


def parse_taints(raw: Iterable[Mapping[str, Any]]) -> tuple[Taint, ...]:
    """``spec.taints`` of a Node object as :class:`Taint` values."""
    return tuple(
        Taint(str(t.get("key", "")), str(t.get("value", "") or ""), str(t.get("effect", "")))
        for t in raw
    )


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Taint) -> bool:
    """Kubernetes' toleration matching for one taint."""
    for tol in tolerations:
        effect = tol.get("effect") or ""
        if effect and effect != taint.effect:
            continue
        key = tol.get("key") or ""
        operator = tol.get("operator") or "Equal"
        if not key:
            if operator == "Exists":
                return True
            continue
        if key != taint.key:
            continue
        if operator == "Exists" or str(tol.get("value") or "") == taint.value:
            return True
    return False


def blocking_taints(node: Tainted, tolerations: Iterable[Mapping[str, Any]]) -> list[Taint]:
    """Taints that keep a pod with ``tolerations`` off ``node`` (NoSchedule / NoExecute)."""
    tols = list(tolerations)
    return [
        t for t in node.taints if t.effect in ("NoSchedule", "NoExecute") and not tolerates(tols, t)
    ]
