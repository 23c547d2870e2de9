"""ResourceClaims (``resource.k8s.io/v1``) → the ``gpu.nvidia.com`` devices they hold (pure).

A device a claim's allocation names is no longer free: the scheduler hands it to no other claim
until that claim is deallocated. So on DRA nodes ``Placeable`` and the queueing rule count the
devices no claim holds, plus those held by the serving's own pods (a running serving must not
see its own GPUs as taken).

A pod's claim is made by the ResourceClaim controller from the pod's ResourceClaimTemplate and
owned by the pod (an ``ownerReferences`` entry of kind ``Pod``, ``controller: true``). The
serving's pods are named after its workload: a Deployment's ``<name>-<pod-template-hash>-<5>``,
a LeaderWorkerSet's ``<name>-<group>`` (leader) and ``<name>-<group>-<worker>``. That is how a
claim is recognised as the serving's own (:meth:`ClaimOwner.owns`).

Defensive: a claim is whatever the API server (or a file) handed us; a malformed entry is
skipped, never raised on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from deepseek_operator import names

# The alphabet of generated names (apimachinery's rand.SafeEncodeString): pod-template hashes
# and the 5-character suffix of a generateName.
_SAFE = "bcdfghjklmnpqrstvwxz2456789"
_DEPLOYMENT_POD = re.compile(rf"-[{_SAFE}]{{1,10}}-[{_SAFE}]{{5}}")
_LWS_POD = re.compile(r"-(0|[1-9][0-9]*)(-(0|[1-9][0-9]*))?")
_BASE_MAX = 58  # apimachinery's maxGeneratedNameLength: 63 less the 5-character suffix
_TRUNCATED_HASH = re.compile(rf"[{_SAFE}]*-?")
_SUFFIX = re.compile(rf"[{_SAFE}]{{5}}")


@dataclass(frozen=True, slots=True)
class HeldDevice:
    """One ``gpu.nvidia.com`` device a claim's allocation holds."""

    pool: str
    device: str
    namespace: str
    claim: str
    pod: str = ""  # the pod owning the claim ("" when no pod owns it)


@dataclass(frozen=True, slots=True)
class ClaimOwner:
    """The workloads whose pods' claims are a serving's own: in ``namespace``, named
    ``workloads`` (one for an aggregated serving, one per role of a disaggregated one)."""

    namespace: str
    workloads: frozenset[str]

    def owns(self, held: HeldDevice) -> bool:
        """Whether ``held`` is held by a claim of one of this serving's pods."""
        return held.namespace == self.namespace and self.owns_pod(held.pod)

    def owns_pod(self, pod: str) -> bool:
        """Whether ``pod`` (in :attr:`namespace`) is named as a pod of one of the workloads."""
        return bool(pod) and any(pod_of_workload(pod, w) for w in self.workloads)


def pod_of_workload(pod: str, workload: str) -> bool:
    """Whether ``pod`` is named as a pod of the Deployment or LeaderWorkerSet ``workload``.

    A generated name keeps at most 58 characters of its base (the ReplicaSet's name and a
    dash) before the 5-character suffix, so a long Deployment's pod is ``<base[:58]><suffix>``.
    """
    if not workload or not pod.startswith(workload):
        return False
    rest = pod[len(workload) :]
    if _DEPLOYMENT_POD.fullmatch(rest) or _LWS_POD.fullmatch(rest):
        return True
    base, suffix = pod[:_BASE_MAX], pod[_BASE_MAX:]
    return (
        len(pod) == _BASE_MAX + 5
        and base.startswith(workload + "-")
        and _TRUNCATED_HASH.fullmatch(base[len(workload) + 1 :]) is not None
        and _SUFFIX.fullmatch(suffix) is not None
    )


def _owner_pod(meta: Mapping[str, Any]) -> str:
    owners = meta.get("ownerReferences")
    if not isinstance(owners, list):
        return ""
    pods = [
        o
        for o in owners
        if isinstance(o, Mapping) and o.get("kind") == "Pod" and isinstance(o.get("name"), str)
    ]
    controller = [o for o in pods if o.get("controller") is True]
    chosen = (controller or pods)[:1]
    return str(chosen[0]["name"]) if chosen else ""


def _results(item: Mapping[str, Any]) -> list[Any]:
    status = item.get("status")
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    devices = allocation.get("devices") if isinstance(allocation, Mapping) else None
    results = devices.get("results") if isinstance(devices, Mapping) else None
    return results if isinstance(results, list) else []


def claim_of(item: Any) -> dict[str, Any] | None:
    """What the operator keeps of a ResourceClaim: its namespace, name and owning pod, and per
    allocated ``gpu.nvidia.com`` device its driver, pool and name. None for a claim that holds
    no such device (unallocated, another driver's, or malformed), which holds no GPU.

    Results with ``adminAccess: true`` are left out: they monitor a device without taking it.
    """
    if not isinstance(item, Mapping):
        return None
    meta = item.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not isinstance(namespace, str):
        return None
    devices = [
        {"driver": r["driver"], "pool": r["pool"], "device": r["device"]}
        for r in _results(item)
        if isinstance(r, Mapping)
        and r.get("driver") == names.DRA_GPU_DRIVER
        and isinstance(r.get("pool"), str)
        and isinstance(r.get("device"), str)
        and r.get("adminAccess") is not True
    ]
    if not devices:
        return None
    return {
        "metadata": {"namespace": namespace, "name": name, "pod": _owner_pod(meta)},
        "devices": devices,
    }


def held_devices(claims: Iterable[Any]) -> tuple[HeldDevice, ...]:
    """Every ``gpu.nvidia.com`` device the claims hold; each claim full (as listed) or already
    reduced by :func:`claim_of`. Malformed claims and entries are skipped."""
    out: list[HeldDevice] = []
    for item in claims:
        kept = item if _is_reduced(item) else claim_of(item)
        if kept is None:
            continue
        meta = kept["metadata"]
        for d in kept["devices"]:
            out.append(
                HeldDevice(d["pool"], d["device"], meta["namespace"], meta["name"], meta["pod"])
            )
    return tuple(out)


def _is_reduced(item: Any) -> bool:
    if not isinstance(item, Mapping) or "status" in item or "spec" in item:
        return False
    meta, devices = item.get("metadata"), item.get("devices")
    return (
        isinstance(meta, Mapping)
        and all(isinstance(meta.get(k), str) for k in ("namespace", "name", "pod"))
        and isinstance(devices, list)
        and all(
            isinstance(d, Mapping)
            and all(isinstance(d.get(k), str) for k in ("driver", "pool", "device"))
            for d in devices
        )
    )
