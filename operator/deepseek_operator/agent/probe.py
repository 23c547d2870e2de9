"""The seam between the node agent and NVML: the :class:`Probe` protocol and recorded probes.

The agent only ever calls ``probe.probe() -> GpuTopology``. :class:`~.nvml.NvmlProbe` is the real
one (and the only module importing pynvml); :class:`RecordedProbe` replays a topology recorded
earlier — a JSON recording (:func:`topology_to_json`) or a ``nvidia-smi topo -m`` capture — so
the agent, its publisher and the labels can be tested on CPU-only machines (docs/node-facts.md).

Contract: ``probe()`` returns a topology with no GPUs (and ``unavailable_reason``) when the node
has no NVML or no GPU; it raises :class:`ProbeError` when NVML works but reading the GPUs fails
midway, so the agent keeps the labels it published last instead of publishing a half truth.
Pure apart from the explicit file reads in the ``from_*_file`` constructors.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Protocol

from deepseek_operator.agent.gpu_topology import FabricInfo, GpuInfo, GpuTopology
from deepseek_operator.agent.topo_smi import parse_topo
from deepseek_operator.errors import DeepSeekOperatorError

RECORDING_VERSION = 1


class ProbeError(DeepSeekOperatorError):
    """NVML is present but reading the GPUs failed; the caller should retry later."""


class Probe(Protocol):
    """Something that reports the GPU topology of this node."""

    def probe(self) -> GpuTopology:
        """Return the current topology (no GPUs when there is no NVML or no GPU)."""
        ...


class RecordedProbe:
    """A probe that returns a fixed, previously recorded topology."""

    def __init__(self, topology: GpuTopology) -> None:
        self._topology = topology

    def probe(self) -> GpuTopology:
        """Return the recorded topology."""
        return self._topology

    @classmethod
    def from_file(cls, path: str | Path) -> RecordedProbe:
        """Load a JSON recording (``{"recording": 1, ...}``) or a ``topo -m`` capture.

        Raises ValueError (with the path) when the file is neither.
        """
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        try:
            if text.lstrip().startswith("{"):
                return cls(topology_from_json(json.loads(text)))
            return cls(parse_topo(text))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: {exc}") from exc


def topology_to_json(topology: GpuTopology) -> dict[str, Any]:
    """A JSON-able recording of ``topology`` (what ``tests/gpu/check_nvml_probe.py`` writes)."""
    gpus = []
    for g in topology.gpus:
        entry: dict[str, Any] = {
            "index": g.index,
            "name": g.name,
            "uuid": g.uuid,
            "busId": g.bus_id,
            "cc": [g.cc_major, g.cc_minor] if g.cc_major is not None else None,
            "memoryMiB": g.memory_mib,
            "numaNode": g.numa_node,
            "nvlinkActiveLinks": g.nvlink_active_links,
            "nvlinkSwitchAttached": g.nvlink_switch_attached,
            "migEnabled": g.mig_enabled,
            "fabric": None,
        }
        if g.fabric is not None:
            entry["fabric"] = {
                "clusterUuid": g.fabric.cluster,
                "cliqueId": g.fabric.clique_id,
                "state": g.fabric.state,
                "status": g.fabric.status,
                "healthMask": g.fabric.health_mask,
                "healthSummary": g.fabric.health_summary,
            }
        gpus.append(entry)
    return {
        "recording": RECORDING_VERSION,
        "source": topology.source,
        "driverVersion": topology.driver_version,
        "cudaDriverVersion": topology.cuda_driver_version,
        "fabricProbed": topology.fabric_probed,
        "unavailableReason": topology.unavailable_reason,
        "gpus": gpus,
        "nvlink": [
            "".join("?" if c is None else ("1" if c else "0") for c in row)
            for row in topology.nvlink
        ],
    }


def _fabric_from_json(doc: dict[str, Any] | None) -> FabricInfo | None:
    if doc is None:
        return None
    return FabricInfo(
        cluster_uuid=uuid.UUID(doc["clusterUuid"]).bytes,
        clique_id=int(doc["cliqueId"]),
        state=int(doc["state"]),
        status=int(doc["status"]),
        health_mask=doc.get("healthMask"),
        health_summary=doc.get("healthSummary"),
    )


def topology_from_json(doc: dict[str, Any]) -> GpuTopology:
    """Rebuild a :class:`GpuTopology` from :func:`topology_to_json` output."""
    if doc.get("recording") != RECORDING_VERSION:
        raise ValueError(f'not a topology recording (expected "recording": {RECORDING_VERSION})')
    gpus = []
    for g in doc["gpus"]:
        cc = g.get("cc")
        gpus.append(
            GpuInfo(
                index=int(g["index"]),
                name=g.get("name"),
                uuid=g.get("uuid"),
                bus_id=g.get("busId"),
                cc_major=int(cc[0]) if cc else None,
                cc_minor=int(cc[1]) if cc else None,
                memory_mib=g.get("memoryMiB"),
                numa_node=g.get("numaNode"),
                nvlink_active_links=g.get("nvlinkActiveLinks"),
                nvlink_switch_attached=g.get("nvlinkSwitchAttached"),
                mig_enabled=g.get("migEnabled"),
                fabric=_fabric_from_json(g.get("fabric")),
            )
        )
    symbols = {"1": True, "0": False, "?": None}
    nvlink = []
    for row in doc["nvlink"]:
        if any(c not in symbols for c in row):
            raise ValueError(f"NVLink row {row!r} may hold only '1', '0' and '?'")
        nvlink.append(tuple(symbols[c] for c in row))
    return GpuTopology(
        gpus=tuple(gpus),
        nvlink=tuple(nvlink),
        driver_version=doc.get("driverVersion"),
        cuda_driver_version=doc.get("cudaDriverVersion"),
        unavailable_reason=doc.get("unavailableReason"),
        fabric_probed=bool(doc.get("fabricProbed", False)),
        source=str(doc.get("source", "recording")),
    )
