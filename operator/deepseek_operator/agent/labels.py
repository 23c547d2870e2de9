"""What the node agent publishes for a :class:`GpuTopology`: labels and one JSON annotation.

The scheme is docs/node-facts.md (labels and the annotation). Every key lives under
:data:`~.labels.AGENT_PREFIX`; every value is a valid Kubernetes label value. A label is left out
when the source does not know its value (a ``topo -m`` capture knows no link counts), never
filled with a guess. Pure: the agent, the ``topology`` command and the tests call these same
functions.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from deepseek_operator import names
from deepseek_operator.agent.gpu_topology import (
    FABRIC_STATE_COMPLETED,
    FABRIC_STATE_IN_PROGRESS,
    FABRIC_STATE_NOT_STARTED,
    NVML_SUCCESS,
    GpuTopology,
)

ANNOTATION_VERSION = 1
MIXED = "mixed"
UNKNOWN = "unknown"

MNNVL_READY = "ready"
MNNVL_PENDING = "pending"
MNNVL_DEGRADED = "degraded"
MNNVL_NONE = "none"

_LABEL_VALUE_MAX = 63
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_GFD_DROP_RE = re.compile(r"[^A-Za-z0-9\-_. ]")


def is_valid_label_value(value: str) -> bool:
    """Whether ``value`` is a valid Kubernetes label value (≤63 chars, alphanumeric ends)."""
    return len(value) <= _LABEL_VALUE_MAX and bool(_LABEL_VALUE_RE.match(value))


def sanitise_label_value(value: str) -> str:
    """Make ``value`` a valid label value: drop invalid characters, cut to 63, trim the ends."""
    cleaned = re.sub(r"[^-A-Za-z0-9_.]", "", value.strip().replace(" ", "-"))
    cleaned = cleaned[:_LABEL_VALUE_MAX]
    return cleaned.strip("-_.")


def gfd_product(name: str) -> str:
    """GPU Feature Discovery's product string: ``NVIDIA B300 SXM6 AC`` → ``NVIDIA-B300-SXM6-AC``.

    GFD drops characters outside ``[A-Za-z0-9-_. ]`` and joins the words with ``-``; the result
    is then made a valid label value (GFD's own output can exceed 63 chars on odd names).
    """
    return sanitise_label_value("-".join(_GFD_DROP_RE.sub("", name).split()))


def _common(values: list[str]) -> str | None:
    """The one value all GPUs share, ``mixed`` when they differ, None when any is unknown."""
    if not values:
        return None
    return values[0] if len(set(values)) == 1 else MIXED


def mnnvl_state(topology: GpuTopology) -> tuple[str, str | None]:
    """The ``mnnvl.state`` value and, when it is accepted, the domain key ``<uuid>.<clique>``.

    Strict form of docs/node-facts.md: the clique is published only when *every* GPU passes the
    acceptance rule and all agree on cluster UUID and clique ID. ``none``: no fabric (the call is
    unsupported, state NOT_SUPPORTED, or COMPLETED with a zero UUID as non-MNNVL H100s report).
    ``pending``: Fabric Manager / NVLSM has not finished. ``degraded``: MNNVL hardware where a
    GPU failed the rule, the GPUs disagree, or the fabric reports a health problem.
    """
    fabrics = [gpu.fabric for gpu in topology.gpus]
    present = [f for f in fabrics if f is not None]
    if not present:
        return MNNVL_NONE, None
    if any(f.state in (FABRIC_STATE_NOT_STARTED, FABRIC_STATE_IN_PROGRESS) for f in present):
        return MNNVL_PENDING, None
    accepted = [f for f in present if f.accepted]
    if len(accepted) == len(fabrics) and len({f.domain_key for f in accepted}) == 1:
        if any(f.unhealthy for f in accepted):
            return MNNVL_DEGRADED, accepted[0].domain_key
        return MNNVL_READY, accepted[0].domain_key
    failed = any(f.state == FABRIC_STATE_COMPLETED and f.status != NVML_SUCCESS for f in present)
    if accepted or failed:
        return MNNVL_DEGRADED, None
    return MNNVL_NONE, None


def labels_for(topology: GpuTopology) -> dict[str, str]:
    """The node labels (docs/node-facts.md) for ``topology``; keys sorted, values valid.

    A node without GPUs gets only ``present=false``, so the operator can tell "the agent ran and
    found nothing" from "no agent".
    """
    if topology.count == 0:
        return {names.AGENT_PRESENT: "false"}
    gpus = topology.gpus
    out: dict[str, str] = {
        names.AGENT_PRESENT: "true",
        names.AGENT_COUNT: str(topology.count),
    }
    gpu_names = [g.name for g in gpus]
    if all(n is not None for n in gpu_names):
        product = _common([gfd_product(n) for n in gpu_names if n is not None])
        if product:
            out[names.AGENT_PRODUCT] = product
    ccs = [g.cc for g in gpus]
    if all(c is not None for c in ccs):
        cc = _common([c for c in ccs if c is not None])
        if cc:
            out[names.AGENT_CC] = cc
    majors = [g.cc_major for g in gpus]
    if all(m is not None for m in majors):
        family = _common([f"sm{m * 10}" for m in majors if m is not None])
        if family:
            out[names.AGENT_SM_FAMILY] = family
    memories = [g.memory_mib for g in gpus]
    if all(m is not None for m in memories):
        out[names.AGENT_MEMORY_MIB] = str(min(m for m in memories if m is not None))
    if topology.driver_version:
        driver = sanitise_label_value(topology.driver_version)
        if driver:
            out[names.AGENT_DRIVER] = driver
    if topology.cuda_version:
        out[names.AGENT_CUDA] = topology.cuda_version

    connected = topology.fully_connected()
    out[names.AGENT_NVLINK_FULLY_CONNECTED] = (
        UNKNOWN if connected is None else str(connected).lower()
    )
    out[names.AGENT_NVLINK_DOMAIN_SIZE] = str(len(topology.nvlink_domain()))
    switch = [g.nvlink_switch_attached for g in gpus]
    if any(s is True for s in switch):
        out[names.AGENT_NVLINK_SWITCH] = "true"
    elif all(s is False for s in switch):
        out[names.AGENT_NVLINK_SWITCH] = "false"
    links = [g.nvlink_active_links for g in gpus]
    if all(n is not None for n in links):
        out[names.AGENT_NVLINK_LINKS] = str(min(n for n in links if n is not None))

    if topology.fabric_probed:
        state, domain_key = mnnvl_state(topology)
        out[names.AGENT_MNNVL_STATE] = state
        if domain_key is not None:
            cluster, _, _ = domain_key.partition(".")
            out[names.AGENT_MNNVL_CLIQUE] = domain_key
            out[names.AGENT_MNNVL_DOMAIN] = cluster

    mig = [g.mig_enabled for g in gpus]
    if any(m is True for m in mig):
        out[names.AGENT_MIG] = "true"
    elif all(m is False for m in mig):
        out[names.AGENT_MIG] = "false"

    for key, value in out.items():
        if not is_valid_label_value(value):  # pragma: no cover - guarded by construction
            raise ValueError(f"label {key}={value!r} is not a valid Kubernetes label value")
    return dict(sorted(out.items()))


def nvlink_bits(topology: GpuTopology) -> str:
    """The row-major N×N NVLink matrix as a string: ``1`` OK, ``0`` not, ``?`` not shown."""
    return "".join(
        "?" if cell is None else ("1" if cell else "0") for row in topology.nvlink for cell in row
    )


def annotation_document(topology: GpuTopology) -> dict[str, Any]:
    """The annotation as a dict (docs/node-facts.md), ``gen`` being a hash of the rest."""
    gpus: list[dict[str, Any]] = []
    for g in topology.gpus:
        entry: dict[str, Any] = {"i": g.index}
        for short, value in (
            ("uuid", g.uuid),
            ("bus", g.bus_id),
            ("name", g.name),
            ("cc", g.cc),
            ("mib", g.memory_mib),
            ("numa", g.numa_node),
            ("links", g.nvlink_active_links),
            ("sw", g.nvlink_switch_attached),
            ("mig", g.mig_enabled),
        ):
            if value is not None:
                entry[short] = value
        if g.fabric is not None:
            f = g.fabric
            fabric: dict[str, Any] = {
                "cluster": f.cluster,
                "clique": f.clique_id,
                "state": f.state,
                "status": f.status,
            }
            if f.health_mask is not None:
                fabric["healthMask"] = f.health_mask
            if f.health_summary is not None:
                fabric["healthSummary"] = f.health_summary
            entry["fabric"] = fabric
        gpus.append(entry)
    doc: dict[str, Any] = {"v": ANNOTATION_VERSION, "gpus": gpus, "nvlink": nvlink_bits(topology)}
    if topology.driver_version is not None:
        doc["driver"] = topology.driver_version
    if topology.cuda_version is not None:
        doc["cuda"] = topology.cuda_version
    doc["source"] = topology.source
    digest = hashlib.sha256(_compact(doc).encode()).hexdigest()
    # "gen" leads the document so a human reading `kubectl get node -o yaml` sees it first.
    return {"v": ANNOTATION_VERSION, "gen": f"sha256:{digest[:16]}", **doc}


def annotation_for(topology: GpuTopology) -> str:
    """The ``gpu.deepseek-operator.io/topology`` annotation value: compact, versioned JSON."""
    return _compact(annotation_document(topology))


def _compact(doc: dict[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=True)
