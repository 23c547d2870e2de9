"""ResourceClaims (``resource.k8s.io/v1``) → the ``gpu.nvidia.com`` devices they hold (pure).

A device a claim's allocation names is no longer free: the scheduler hands it to no other claim
until that claim is deallocated. So on DRA nodes ``Placeable`` and the queueing rule count the
devices no claim holds, plus those held by the serving's own pods (a running serving must not
see its own GPUs as taken).

A pod's claim is made by the ResourceClaim controller from the pod's ResourceClaimTemplate and
owned by the pod (an ``ownerReferences`` entry of kind ``Pod``, ``controller: true``) and
annotated with the name of the pod's claim entry (``resource.kubernetes.io/pod-claim-name``,
``gpus`` for the operator's pods). A claim is recognised as the serving's own
(:meth:`ClaimOwner.owns`) when it is generated for the pod claim ``gpus`` of a pod named as the
serving's workload names its pods: a Deployment's ``<name>-<pod-template-hash>-<5>``, a
LeaderWorkerSet's ``<name>-<group>`` (leader) and ``<name>-<group>-<worker>``. A claim the pod
references by name (``resourceClaimName``), or generated for another claim entry, is never the
serving's.

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

GPU_POD_CLAIM = "gpus"
"""The name of the serving pods' claim entry for their GPUs (and of its template's request)."""
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
"""Set by the ResourceClaim controller on a claim it generates: the pod's claim entry."""


@dataclass(frozen=True, slots=True)
class HeldDevice:
    """One ``gpu.nvidia.com`` device a claim's allocation holds."""

    pool: str
    device: str
    namespace: str
    claim: str
    pod: str = ""  # the pod owning the claim ("" when no pod owns it)
    pod_claim: str = ""  # the pod's claim entry it was generated for (POD_CLAIM_ANNOTATION)
    # A share of a device that allows multiple allocations: the capacity it consumes, as the
    # result's consumedCapacity states it ((name, quantity) pairs); () = the whole device.
    consumed: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ClaimOwner:
    """The workloads whose pods' claims are a serving's own: in ``namespace``, named
    ``workloads`` (one for an aggregated serving, one per role of a disaggregated one)."""

    namespace: str
    workloads: frozenset[str]

    def owns(self, held: HeldDevice) -> bool:
        """Whether ``held`` is held by a claim of one of this serving's pods."""
        return (
            held.namespace == self.namespace
            and held.pod_claim == GPU_POD_CLAIM
            and self.owns_pod(held.pod)
        )

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
    A result that consumes part of a shared device (consumable capacity: ``consumedCapacity``)
    keeps what it consumes, so the device's remaining capacity can be counted as the scheduler
    counts it.
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
        {"driver": r["driver"], "pool": r["pool"], "device": r["device"], **_consumed(r)}
        for r in _results(item)
        if isinstance(r, Mapping)
        and r.get("driver") == names.DRA_GPU_DRIVER
        and isinstance(r.get("pool"), str)
        and isinstance(r.get("device"), str)
        and r.get("adminAccess") is not True
    ]
    if not devices:
        return None
    annotations = meta.get("annotations")
    pod_claim = annotations.get(POD_CLAIM_ANNOTATION) if isinstance(annotations, Mapping) else ""
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "pod": _owner_pod(meta),
            "podClaim": pod_claim if isinstance(pod_claim, str) else "",
        },
        "devices": devices,
    }


def _consumed(result: Mapping[str, Any]) -> dict[str, Any]:
    """``{"consumed": {name: quantity}}`` for a result that consumes part of a shared device
    (the capacity names as the result writes them), else nothing."""
    raw = result.get("consumedCapacity")
    if not isinstance(raw, Mapping) or not raw:
        return {}
    return {"consumed": {str(k): str(v) for k, v in raw.items() if isinstance(v, str | int)}}


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
            consumed = tuple(sorted((d.get("consumed") or {}).items()))
            out.append(
                HeldDevice(
                    d["pool"],
                    d["device"],
                    meta["namespace"],
                    meta["name"],
                    meta["pod"],
                    str(meta.get("podClaim") or ""),
                    consumed,
                )
            )
    return tuple(out)


def _is_reduced(item: Any) -> bool:
    if not isinstance(item, Mapping) or "status" in item or "spec" in item:
        return False
    meta, devices = item.get("metadata"), item.get("devices")
    return (
        isinstance(meta, Mapping)
        and all(isinstance(meta.get(k), str) for k in ("namespace", "name", "pod"))
        and isinstance(meta.get("podClaim", ""), str)
        and isinstance(devices, list)
        and all(
            isinstance(d, Mapping)
            and all(isinstance(d.get(k), str) for k in ("driver", "pool", "device"))
            and isinstance(d.get("consumed", {}), Mapping)
            for d in devices
        )
    )
