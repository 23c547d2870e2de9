"""Which node label states which GPU fact, and which label wins: the ONE precedence table.

Precedence (docs/design.md): the node agent's ``gpu.deepseek-operator.io/`` labels win over what
the node's ``gpu.nvidia.com`` ResourceSlices publish (DRA, :mod:`.dra`), which wins over GPU
Feature Discovery's ``nvidia.com/`` labels, which win over what the exact product name implies.
For each fact the first source whose label key is PRESENT decides, exactly as a chain of
``DoesNotExist`` node-selector expressions does. DRA ranks under the agent (which alone measures
NVLink and is the project's own reading of NVML) but over GFD: the driver publishes every device,
where GFD describes the first one, and a pod that claims GPUs through DRA gets exactly those
devices. Node affinity cannot see a slice, so a DRA fact admits a node through the claim's CEL
selectors instead of an affinity term. :meth:`Fact.read` gives the engine's view of a
node (used by :func:`~deepseek_operator.nodes.facts.node_facts`) and :meth:`Fact.terms` the
scheduler's (used by the affinity renderer), so the two cannot disagree.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from deepseek_operator import names
from deepseek_operator.catalog.gpus import EXACT_PRODUCT_CC, INFERRED_NVLINK_PRODUCTS, sm_family
from deepseek_operator.nodes.dra_device import ATTR_CC, ATTR_PRODUCT, CAPACITY_MEMORY
from deepseek_operator.nodes.dra_gpus import DraGpus

# Where a fact came from, as messages name it.
SOURCE_AGENT = "agent"
SOURCE_GFD = "GFD"
SOURCE_PRODUCT = "inferred from product"
SOURCE_DRA = "DRA"
SOURCE_DRA_PRODUCT = "inferred from DRA productName"

Expr = dict[str, Any]
"""One node-selector requirement (``matchExpressions`` entry)."""
Term = list[Expr]
"""One ``nodeSelectorTerm``: its expressions are ANDed; terms are ORed."""

FactT = TypeVar("FactT")
WantedT = TypeVar("WantedT")
ComputeFact = tuple[str, tuple[int, int] | None]
"""(sm family, compute capability when the labels state it)."""


def label_in(key: str, values: Sequence[str]) -> Expr:
    """``key In values``."""
    return {"key": key, "operator": "In", "values": list(values)}


def label_absent(key: str) -> Expr:
    """``key DoesNotExist``."""
    return {"key": key, "operator": "DoesNotExist"}


def label_at_least(key: str, minimum: int) -> Expr:
    """``key Gt minimum - 1``: ``Gt`` is strict, and a node with exactly the minimum fits."""
    return {"key": key, "operator": "Gt", "values": [str(minimum - 1)]}


def parse_int(value: Any) -> int | None:
    """An integer label value, or None when it is not one."""
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


_GO_INT = re.compile(r"[+-]?[0-9]+")
_CANONICAL_INT = re.compile(r"0|[1-9][0-9]*")


def parse_gt_int(value: str) -> int | None:
    """A label value as the scheduler's ``Gt`` reads it (Go's ParseInt: digits, int64), or None."""
    if _GO_INT.fullmatch(value) is None:
        return None
    number = int(value)
    return number if -(2**63) <= number < 2**63 else None


def parse_exact_int(value: str) -> int | None:
    """A label value an ``In`` match on its decimal text admits (``"10"``, never ``"010"``)."""
    return int(value) if _CANONICAL_INT.fullmatch(value) is not None else None


# What the node agent writes (agent/labels.py); anything else is a hand edit or a foreign writer.
_AGENT_FAMILY = re.compile(r"sm[1-9][0-9]*0|mixed")


def label_problems(labels: Mapping[str, str]) -> tuple[str, ...]:
    """The GPU-fact labels whose raw value the scheduler cannot match, quoted, one line each."""
    problems: list[str] = []
    for key in (names.GFD_CC_MAJOR,):
        if key in labels and parse_exact_int(labels[key]) is None:
            problems.append(
                f"{key}={labels[key]!r} is not a plain decimal integer, so no affinity term "
                "can match it"
            )
    family = labels.get(names.AGENT_SM_FAMILY)
    if family is not None and _AGENT_FAMILY.fullmatch(family) is None:
        problems.append(
            f"{names.AGENT_SM_FAMILY}={family!r} is not a family the affinity matches (the agent "
            "writes lower-case sm<major>0, e.g. 'sm100', or 'mixed')"
        )
    for key in (names.AGENT_MEMORY_MIB, names.GFD_MEMORY):
        if key in labels and parse_gt_int(labels[key]) is None:
            problems.append(
                f"{key}={labels[key]!r} is not an integer the scheduler's Gt can compare, so "
                "no GPU memory minimum admits the node"
            )
    return tuple(problems)


def parse_cc(text: str) -> tuple[int, int] | None:
    """``"10.0"`` → ``(10, 0)``; None when unparsable."""
    major, _, minor = text.partition(".")
    a, b = parse_int(major), parse_int(minor or "0")
    return (a, b) if a is not None and b is not None else None


def _tristate(text: str | None) -> bool | None:
    if text == "true":
        return True
    if text == "false":
        return False
    return None


def _family_major(family: str) -> str:
    """``sm100`` → ``10``: the GFD ``compute.major`` value of an sm family."""
    return family.removeprefix("sm")[:-1]


@dataclass(frozen=True)
class LabelSource(Generic[FactT, WantedT]):
    """One label that can state a fact."""

    key: str
    origin: str  # SOURCE_AGENT, SOURCE_GFD or SOURCE_PRODUCT
    read: Callable[[Mapping[str, str]], FactT | None]  # called only when ``key`` is present
    selector: Callable[[WantedT], Expr]  # the expression on ``key`` that admits ``wanted``
    # The agent's "unknown" is still the agent's statement: the fact stays unknown and the
    # origin is kept, rather than falling back to a lower source.
    states_unknown: bool = False
    # The values its writer uses, when it has a fixed set: any other is quoted as a hand edit.
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class Fact(Generic[FactT, WantedT]):
    """A GPU fact with its sources in precedence order."""

    name: str
    sources: tuple[LabelSource[FactT, WantedT], ...]
    # Nodes with none of the labels are admitted (nothing to check against).
    unknown_admitted: bool = False
    # What a node's DRA devices state (None: DRA cannot state this fact), consulted before the
    # label source at index ``dra_rank``; ``dra_attribute`` is what messages quote.
    dra: Callable[[DraGpus], FactT | None] | None = None
    dra_rank: int = 1
    dra_attribute: str = ""
    dra_origin: str = SOURCE_DRA

    def _dra_value(self, dra: DraGpus | None) -> FactT | None:
        if self.dra is None or dra is None or not dra.devices:
            return None
        return self.dra(dra)

    def read(
        self, labels: Mapping[str, str], dra: DraGpus | None = None
    ) -> tuple[FactT | None, str | None]:
        """The fact and where it came from (``None, None`` when no source states it)."""
        for rank, source in enumerate(self.sources):
            if rank == self.dra_rank and (value := self._dra_value(dra)) is not None:
                return value, self.dra_origin
            if source.key in labels:
                value = source.read(labels)
                stated = value is not None or source.states_unknown
                return value, source.origin if stated else None
        if self.dra_rank >= len(self.sources) and (value := self._dra_value(dra)) is not None:
            return value, self.dra_origin
        return None, None

    def decided_by_dra(self, labels: Mapping[str, str], dra: DraGpus | None) -> bool:
        """Whether the node's DRA devices, not a label, decide this fact."""
        return dra is not None and self.read(labels, dra)[1] == self.dra_origin

    def evidence(self, labels: Mapping[str, str], dra: DraGpus | None = None) -> str:
        """The label (or ResourceSlice) that decides this fact on a node, quoted as written with
        its source (``gpu.deepseek-operator.io/sm-family='sm100' (agent)``), or which labels
        are absent.

        Every node message quotes this, so a user can see which label to fix: the deciding
        label is the first source present, even when its value states nothing usable.
        """
        if dra is not None and self.decided_by_dra(labels, dra):
            return dra.evidence(self.dra_attribute).removesuffix(f"({SOURCE_DRA})") + (
                f"({self.dra_origin})"
            )
        for source in self.sources:
            if source.key in labels:
                value = source.read(labels)
                quoted = f"{source.key}={labels[source.key]!r}"
                if value is None and not source.states_unknown:
                    return f"{quoted} ({source.origin}: says nothing of {self.name})"
                if source.values and labels[source.key] not in source.values:
                    known = ", ".join(repr(v) for v in source.values)
                    return f"{quoted} ({source.origin}: none of {known}, so {self.name} is unknown)"
                return f"{quoted} ({source.origin})"
        absent = "no " + " or ".join(s.key for s in self.sources) + " label"
        return absent + (" and no ResourceSlice stating it" if self.dra is not None else "")

    def stating_key(self, labels: Mapping[str, str]) -> str | None:
        """The key of the label that decides this fact (the first source present), or None."""
        return next((s.key for s in self.sources if s.key in labels), None)

    def terms(self, wanted: WantedT) -> list[Term]:
        """ORed node-selector terms admitting exactly the nodes whose fact matches ``wanted``."""
        terms: list[Term] = []
        for rank, source in enumerate(self.sources):
            higher = [label_absent(s.key) for s in self.sources[:rank]]
            terms.append([*higher, source.selector(wanted)])
        if self.unknown_admitted:
            terms.append([label_absent(s.key) for s in self.sources])
        return terms

    def dra_terms(self, wanted: WantedT) -> list[Term]:
        """:meth:`terms` for pods that claim GPUs through DRA: the label sources that outrank
        DRA keep their terms; where none of them is present DRA decides, through the claim's
        CEL selectors, so that term admits the node."""
        if self.dra is None:
            return self.terms(wanted)
        higher = self.sources[: self.dra_rank]
        terms = [
            [*(label_absent(s.key) for s in higher[:rank]), source.selector(wanted)]
            for rank, source in enumerate(higher)
        ]
        return [*terms, [label_absent(s.key) for s in higher]]


def _gfd_compute(labels: Mapping[str, str]) -> ComputeFact | None:
    # Only the exact text the affinity's ``In`` lists: "010" is 10 to int() but to no selector.
    major = parse_exact_int(labels[names.GFD_CC_MAJOR])
    if major is None:
        return None
    minor = parse_int(labels.get(names.GFD_CC_MINOR, "0")) or 0
    return sm_family(major), (major, minor)


def _product_compute(labels: Mapping[str, str]) -> ComputeFact | None:
    cc = EXACT_PRODUCT_CC.get(labels[names.GFD_PRODUCT])
    return (sm_family(cc[0]), cc) if cc is not None else None


COMPUTE: Fact[ComputeFact, Collection[str]] = Fact(
    "compute capability",
    (
        LabelSource(
            names.AGENT_SM_FAMILY,
            SOURCE_AGENT,
            read=lambda labels: (
                labels[names.AGENT_SM_FAMILY],
                parse_cc(labels.get(names.AGENT_CC, "")),
            ),
            selector=lambda families: label_in(names.AGENT_SM_FAMILY, list(families)),
        ),
        LabelSource(
            names.GFD_CC_MAJOR,
            SOURCE_GFD,
            read=_gfd_compute,
            selector=lambda families: label_in(
                names.GFD_CC_MAJOR, [_family_major(f) for f in families]
            ),
        ),
        LabelSource(
            names.GFD_PRODUCT,
            SOURCE_PRODUCT,
            read=_product_compute,
            selector=lambda families: label_in(
                names.GFD_PRODUCT,
                [p for p, cc in EXACT_PRODUCT_CC.items() if sm_family(cc[0]) in families],
            ),
        ),
    ),
    dra=lambda gpus: gpus.compute,
    dra_attribute=ATTR_CC,
)
"""The sm family (and compute capability) of a node's GPUs; wanted: a set of families."""

NVLINK: Fact[bool, bool] = Fact(
    "NVLink connectivity",
    (
        LabelSource(
            names.AGENT_NVLINK_FULLY_CONNECTED,
            SOURCE_AGENT,
            read=lambda labels: _tristate(labels[names.AGENT_NVLINK_FULLY_CONNECTED]),
            selector=lambda _: label_in(names.AGENT_NVLINK_FULLY_CONNECTED, ["true"]),
            states_unknown=True,
            values=("true", "false", "unknown"),
        ),
        LabelSource(
            names.GFD_PRODUCT,
            SOURCE_PRODUCT,
            # Only the exact NVSwitch / NVL-tray products imply an all-to-all NVLink mesh.
            read=lambda labels: (
                True if labels[names.GFD_PRODUCT] in INFERRED_NVLINK_PRODUCTS else None
            ),
            selector=lambda _: label_in(names.GFD_PRODUCT, INFERRED_NVLINK_PRODUCTS),
        ),
    ),
    # DRA publishes no NVLink relation between devices; only the product can imply the mesh.
    dra=lambda gpus: True if gpus.product in INFERRED_NVLINK_PRODUCTS else None,
    dra_attribute=ATTR_PRODUCT,
    dra_origin=SOURCE_DRA_PRODUCT,
)
"""Whether every GPU pair of the node is NVLink-connected; wanted: True."""

MEMORY_MIB: Fact[int, int] = Fact(
    "GPU memory",
    (
        # An unparsable value counts as 0, as a `Gt` node-selector requirement would not match it.
        LabelSource(
            names.AGENT_MEMORY_MIB,
            SOURCE_AGENT,
            read=lambda labels: parse_gt_int(labels[names.AGENT_MEMORY_MIB]) or 0,
            selector=lambda minimum: label_at_least(names.AGENT_MEMORY_MIB, minimum),
        ),
        LabelSource(
            names.GFD_MEMORY,
            SOURCE_GFD,
            read=lambda labels: parse_gt_int(labels[names.GFD_MEMORY]) or 0,
            selector=lambda minimum: label_at_least(names.GFD_MEMORY, minimum),
        ),
    ),
    unknown_admitted=True,
    dra=lambda gpus: gpus.memory_mib,
    dra_attribute=CAPACITY_MEMORY,
)
"""Per-GPU memory in MiB; wanted: the minimum a pod needs."""
