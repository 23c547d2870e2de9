"""ResourceSlices (``resource.k8s.io/v1``) of NVIDIA's ``gpu.nvidia.com`` driver → per-node GPU facts.

On a cluster whose GPUs the DRA driver manages, a node may have no ``nvidia.com/gpu`` allocatable
and no GPU Feature Discovery labels: its GPUs are the devices of its ResourceSlices. The driver
publishes one pool per node: this module groups the slices into pools and the pools by node;
nodes/dra_device.py reads each device and nodes/dra_gpus.py holds what they say about the node.

Pure and defensive: a slice is whatever the API server (or a file) handed us. A malformed slice
or device is reported with what was wrong and is never counted, so it can only keep a node out,
never let one in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from deepseek_operator import names
from deepseek_operator.nodes.claims import HeldDevice
from deepseek_operator.nodes.dra_device import DraGpu, read_device
from deepseek_operator.nodes.dra_gpus import DraGpus, DraInventory


@dataclass
class _Pool:
    node: str
    name: str
    generation: int
    expected: int
    slices: list[Mapping[str, Any]]


def _slice_pool(item: Mapping[str, Any], slice_name: str) -> tuple[str, str, int, int] | str:
    """(node, pool, generation, resourceSliceCount) of a slice, or what is wrong with it."""
    spec = item.get("spec")
    if not isinstance(spec, Mapping):
        return "no spec"
    node = spec.get("nodeName")
    if not isinstance(node, str) or not node:
        return "not tied to one node (no spec.nodeName), so its devices are counted on no node"
    pool = spec.get("pool")
    if not isinstance(pool, Mapping) or not isinstance(pool.get("name"), str):
        return "spec.pool.name missing"
    generation, count = pool.get("generation", 0), pool.get("resourceSliceCount", 1)
    if not isinstance(generation, int) or not isinstance(count, int) or count < 1:
        return (
            f"spec.pool generation={generation!r} resourceSliceCount={count!r} "
            "must be integers (count >= 1)"
        )
    return node, pool["name"], generation, count


def _slice_name(item: Mapping[str, Any]) -> str:
    meta = item.get("metadata")
    return str(meta.get("name", "?")) if isinstance(meta, Mapping) else "?"


def _read_pool(pool: _Pool, where: str) -> tuple[list[DraGpu], list[str]]:
    """The GPUs of one complete pool, and its problems.

    A device name published twice in one pool (by one slice or by two) makes the scheduler
    call the whole pool invalid: it allocates none of its devices, so none is counted here,
    and the problem names the pool, the device and the slices that publish it.
    """
    devices: list[DraGpu] = []
    problems: list[str] = []
    owners: dict[str, list[str]] = {}
    for item in pool.slices:
        raw_devices = item["spec"].get("devices") or []
        if not isinstance(raw_devices, list):
            problems.append(f"{where}: spec.devices is not a list")
            continue
        for device in raw_devices:
            name = device.get("name") if isinstance(device, Mapping) else None
            if isinstance(name, str):
                owners.setdefault(name, []).append(_slice_name(item))
            gpu, why = read_device(device, where, pool.name)
            if gpu is not None:
                devices.append(gpu)
            elif why:
                problems.append(why + "; not counted")
    twice = sorted(name for name, slices in owners.items() if len(slices) > 1)
    if twice:
        shown = ", ".join(
            f"{name!r} (slices {' and '.join(sorted(set(owners[name])))})" for name in twice[:3]
        )
        more = f" and {len(twice) - 3} more" if len(twice) > 3 else ""
        problems.append(
            f"{where}: device {shown}{more} is published twice, so the scheduler treats the "
            "pool as invalid and allocates none of its devices; none is counted"
        )
        return [], problems
    return devices, problems


def slice_of(item: dict[str, Any]) -> dict[str, Any] | None:
    """What the operator keeps of a ResourceSlice: a ``gpu.nvidia.com`` slice's name and spec
    (None for another driver's, which says nothing of GPUs)."""
    spec = item.get("spec")
    if not isinstance(spec, dict) or spec.get("driver") != names.DRA_GPU_DRIVER:
        return None
    return {"metadata": {"name": (item.get("metadata") or {}).get("name", "")}, "spec": spec}


def slice_node(item: Mapping[str, Any] | None) -> str | None:
    """The node a ResourceSlice names (None: none, or not a slice)."""
    spec = item.get("spec") if item else None
    node = spec.get("nodeName") if isinstance(spec, dict) else None
    return node if isinstance(node, str) else None


def read_slices(slices: Iterable[Any], node_names: Iterable[str]) -> DraInventory:
    """Group the ``gpu.nvidia.com`` slices by node and read their GPUs.

    A pool counts only at its newest generation and only once every slice of it is seen
    (``resourceSliceCount``), as the scheduler does: a half-published pool is reported, not
    counted. Slices of other drivers are ignored; a slice naming a node that is not in
    ``node_names`` is reported and counted nowhere.
    """
    known = set(node_names)
    problems: list[tuple[str, str]] = []
    pools: dict[tuple[str, str], _Pool] = {}
    for index, item in enumerate(slices):
        if not isinstance(item, Mapping):
            problems.append((f"#{index}", f"not an object ({item!r:.60})"))
            continue
        meta = item.get("metadata")
        name = str(meta.get("name", f"#{index}")) if isinstance(meta, Mapping) else f"#{index}"
        spec = item.get("spec")
        if isinstance(spec, Mapping) and spec.get("driver") != names.DRA_GPU_DRIVER:
            continue
        found = _slice_pool(item, name)
        if isinstance(found, str):
            problems.append((name, found))
            continue
        node, pool_name, generation, count = found
        if node not in known:
            problems.append((name, f"names node {node!r}, which is not among the Nodes"))
            continue
        pool = pools.get((node, pool_name))
        if pool is None or generation > pool.generation:
            pools[(node, pool_name)] = _Pool(node, pool_name, generation, count, [item])
        elif generation == pool.generation:
            pool.slices.append(item)
    gathered: dict[str, tuple[list[str], list[DraGpu], list[str]]] = {}
    for (node, pool_name), pool in sorted(pools.items()):
        pool_names, devices, node_problems = gathered.setdefault(node, ([], [], []))
        pool_names.append(pool_name)
        where = f"ResourceSlice pool {pool_name!r}"
        if len(pool.slices) != pool.expected:
            node_problems.append(
                f"{where}: {len(pool.slices)} of {pool.expected} slices of generation "
                f"{pool.generation} published, so none of its devices is counted yet"
            )
            continue
        pool_devices, pool_problems = _read_pool(pool, where)
        devices.extend(pool_devices)
        node_problems.extend(pool_problems)
    by_node = {
        node: DraGpus(tuple(p), tuple(sorted(d, key=lambda g: g.name)), tuple(problems_))
        for node, (p, d, problems_) in gathered.items()
    }
    return DraInventory(by_node=by_node, problems=tuple(problems))


def with_claims(inventory: DraInventory, held: Iterable[HeldDevice]) -> DraInventory:
    """``inventory`` with each node's devices that claims hold (``held``, from
    :func:`~deepseek_operator.nodes.claims.held_devices`); a held device that is no well-formed
    GPU of a known node counts nowhere, as it was never counted."""
    where = {
        (d.pool, d.name): node for node, gpus in inventory.by_node.items() for d in gpus.devices
    }
    per_node: dict[str, list[HeldDevice]] = {}
    for h in held:
        node = where.get((h.pool, h.device))
        if node is not None:
            per_node.setdefault(node, []).append(h)
    if not per_node:
        return inventory
    by_node = {
        node: replace(gpus, held=tuple(per_node[node])) if node in per_node else gpus
        for node, gpus in inventory.by_node.items()
    }
    return DraInventory(by_node=by_node, problems=inventory.problems)
