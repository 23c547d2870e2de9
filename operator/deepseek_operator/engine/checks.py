"""What one check of the decision reports: :class:`CheckResult` and its :class:`CheckCategory`.

The category says what kind of check it is (a vLLM rule on the spec, one on the nodes, a
memory fit, the capacity count, or information only) and is what the decision filters on; the
``rule`` is the id of the vLLM rule it mirrors (R2–R14, A1–A10, ``oracle``), for people.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from deepseek_operator.api.status import Check
from deepseek_operator.nodes.facts import NodeFacts
from deepseek_operator.nodes.precedence import COMPUTE, Fact

# vLLM's exact guard messages (docs/decision-rules.md).
VLLM_SQRTSOFTPLUS_ONLY = "DeepSeek V4 MegaMoE currently supports sqrtsoftplus routing only."
VLLM_SM100_ONLY = "DeepGEMM MegaMoE requires SM100 GPUs."
VLLM_DIMS_128 = "DeepGEMM MegaMoE requires hidden and intermediate sizes to be multiples of 128."


class CheckCategory(enum.Enum):
    """What a check is about; the decision filters checks by category, never by name."""

    SPEC = "spec"  # a vLLM rule on the spec or the checkpoint: fails the same on every node
    NODES = "nodes"  # a vLLM rule on the candidate nodes: pods are pinned where it holds
    FIT = "fit"  # the checkpoint's memory fits the nodes' GPUs
    PLACEMENT = "placement"  # the eligible nodes hold every replica
    INFO = "info"  # reported, not enforced


@dataclass(frozen=True)
class CheckResult:
    """One check of the decision, with what it observed."""

    name: str  # CamelCase, e.g. GPUArchitecture
    category: CheckCategory
    rule: str  # the vLLM rule id it mirrors, e.g. R3 or A4 ("" when none)
    passed: bool
    message: str

    @property
    def enforced(self) -> bool:
        """Whether a failure of this check decides the outcome of an explicit backend."""
        return self.category not in (CheckCategory.INFO, CheckCategory.PLACEMENT)

    def to_status(self) -> Check:
        """The ``status.decision.checks`` entry: vLLM rules show their id, the others their category."""
        shown = self.rule if self.category in (CheckCategory.SPEC, CheckCategory.NODES) else ""
        return Check(
            name=self.name,
            rule=shown or self.category.value,
            passed=self.passed,
            message=self.message,
        )


def check(
    name: str, category: CheckCategory, rule: str, *, passed: bool, message: str
) -> CheckResult:
    """Shorthand constructor: what is checked positionally, its outcome by keyword."""
    return CheckResult(name=name, category=category, rule=rule, passed=passed, message=message)


def failed(checks: Sequence[CheckResult]) -> list[CheckResult]:
    """The checks that did not pass, in order."""
    return [c for c in checks if not c.passed]


def short_list(names: Sequence[str], limit: int = 5) -> str:
    """``a, b, c and 4 more``."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def describe_products(nodes: Sequence[NodeFacts], limit: int = 5) -> str:
    """'NVIDIA-GB200, CC 10.0, from <the label that decided> (source)' for each kind of node
    among ``nodes``, then the labels the scheduler cannot match."""
    seen: dict[tuple[str, str], str] = {}
    for n in nodes:
        seen.setdefault((n.product or "unknown product", n.evidence(COMPUTE)), n.cc_text)
    groups = [f"{p}, CC {cc}, from {evidence}" for (p, evidence), cc in sorted(seen.items())]
    text = "; ".join(groups[:limit])
    if len(groups) > limit:
        text += f"; and {len(groups) - limit} more kinds"
    problems = sorted({f"{n.name}: {p}" for n in nodes for p in n.problems})
    return text + "".join(f"; {p}" for p in problems[:limit])


def evidence_counts(nodes: Sequence[NodeFacts], fact: Fact[Any, Any], limit: int = 3) -> str:
    """'from <label> (source) on N node(s); …': which label decided ``fact`` on ``nodes``."""
    counts = Counter(n.evidence(fact) for n in nodes)
    shown = [f"from {evidence} on {count} node(s)" for evidence, count in counts.most_common()]
    more = f"; and {len(shown) - limit} more" if len(shown) > limit else ""
    return "; ".join(shown[:limit]) + more
