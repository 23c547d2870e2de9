"""One reconcile of a DeepSeekServing: decide, apply children, write status, report.

The same pure ``resolve`` / ``render_objects`` / ``build_status`` as the offline ``render``
command. Node facts and live children come from in-memory indexes (no LIST per reconcile).
Children are written only when the live object no longer contains the desired one (so a hand
edit or deletion is restored, and a no-op reconcile writes nothing but, at most, the status).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from deepseek_operator.api.errors import SpecError
from deepseek_operator.api.load import ServingObject, parse_serving
from deepseek_operator.api.status import (
    BACKEND_RESOLVED,
    READY,
    REASON_INVALID_SPEC,
)
from deepseek_operator.controller import metrics
from deepseek_operator.controller.kube import KubeClient
from deepseek_operator.engine.resolve import PreviousDecision, Resolution, resolve
from deepseek_operator.render.status import build_status, status_dict
from deepseek_operator.render.workload import LABEL_REPLICA, render_objects
from deepseek_operator.topology.inventory import NodeFacts, NodeInventory

log = logging.getLogger("deepseek_operator.controller")

ChildKey = tuple[str, str]  # (kind, name)


@dataclass
class Outcome:
    """What one reconcile did (for logs, metrics and tests)."""

    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    status_patched: bool = False
    decision_changed: bool = False
    resolution: Resolution | None = None


def contains(live: Any, desired: Any) -> bool:
    """Whether ``live`` holds every field of ``desired`` with the same value (defaults aside)."""
    if isinstance(desired, dict):
        if not isinstance(live, Mapping):
            return False
        return all(k in live and contains(live[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        if not isinstance(live, list) or len(live) != len(desired):
            return False
        return all(contains(a, b) for a, b in zip(live, desired, strict=True))
    return bool(live == desired)


def previous_decision(body: Mapping[str, Any]) -> PreviousDecision | None:
    """The decision running for THIS generation (None after a spec change or on first sight)."""
    status = body.get("status") or {}
    generation = (body.get("metadata") or {}).get("generation")
    resolved = status.get("resolved") or {}
    decision = status.get("decision") or {}
    if not resolved.get("moeBackend") or status.get("observedGeneration") != generation:
        return None
    return PreviousDecision(
        str(resolved["moeBackend"]),
        str(decision.get("reason", "")),
        serving=int(status.get("readyReplicas") or 0) > 0,
    )


def ready_replicas(
    res: Resolution, obj: ServingObject, live: Mapping[ChildKey, Mapping[str, Any]]
) -> int:
    """Replicas whose pods are all ready, from the live children's status."""
    if res.pods_per_replica == 1:
        deploy = live.get(("Deployment", obj.name)) or {}
        return int((deploy.get("status") or {}).get("readyReplicas") or 0)
    ready = 0
    for replica in range(obj.spec.replicas):
        sets = [
            body
            for (kind, _), body in live.items()
            if kind == "StatefulSet"
            and (body.get("metadata", {}).get("labels") or {}).get(LABEL_REPLICA) == str(replica)
        ]
        if len(sets) == res.pods_per_replica and all(
            int((s.get("status") or {}).get("readyReplicas") or 0) >= 1 for s in sets
        ):
            ready += 1
    return ready


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _invalid_status(body: Mapping[str, Any], error: SpecError) -> dict[str, Any]:
    generation = int((body.get("metadata") or {}).get("generation") or 0)
    old = {c.get("type"): c for c in (body.get("status") or {}).get("conditions") or []}
    conditions = []
    for ctype in (BACKEND_RESOLVED, READY):
        since = (
            old.get(ctype, {}).get("lastTransitionTime")
            if old.get(ctype, {}).get("status") == "False"
            else None
        )
        conditions.append(
            {
                "type": ctype,
                "status": "False",
                "reason": REASON_INVALID_SPEC,
                "message": error.one_line(),
                "observedGeneration": generation,
                "lastTransitionTime": since or _now(),
            }
        )
    return {
        **(body.get("status") or {}),
        "observedGeneration": generation,
        "conditions": conditions,
    }


class Reconciler:
    """Reconciles DeepSeekServings one at a time each (a lock per object)."""

    def __init__(self, kube: KubeClient, post_event: Any = None) -> None:
        self.kube = kube
        self.post_event = post_event  # callable(body, type, reason, message) or None
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    def _lock(self, namespace: str, name: str) -> asyncio.Lock:
        return self._locks.setdefault((namespace, name), asyncio.Lock())

    async def reconcile(
        self,
        body: Mapping[str, Any],
        nodes: Iterable[NodeFacts],
        live: Mapping[ChildKey, Mapping[str, Any]],
        trigger: str,
    ) -> Outcome:
        """Bring children and status of ``body`` in line with the decision on ``nodes``."""
        meta = body.get("metadata") or {}
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        started = time.perf_counter()
        async with self._lock(namespace, name):
            try:
                outcome = await self._reconcile(body, nodes, live)
            except SpecError as exc:
                metrics.RECONCILES.labels(trigger, "invalid").inc()
                status = _invalid_status(body, exc)
                if status != body.get("status"):
                    await self.kube.patch_status(namespace, name, status)
                    self._event(body, "Warning", REASON_INVALID_SPEC, exc.one_line())
                return Outcome(status_patched=True)
            except Exception as exc:
                metrics.RECONCILES.labels(trigger, "error").inc()
                metrics.ERRORS.labels(type(exc).__name__).inc()
                raise
            finally:
                metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)
        metrics.RECONCILES.labels(trigger, "ok").inc()
        log.info(
            "Reconciled DeepSeekServing",
            extra={
                "namespace": namespace,
                "name_": name,
                "trigger": trigger,
                "backend": outcome.resolution.moe_backend if outcome.resolution else None,
                "applied": outcome.applied,
                "status_patched": outcome.status_patched,
            },
        )
        return outcome

    async def _reconcile(
        self,
        body: Mapping[str, Any],
        nodes: Iterable[NodeFacts],
        live: Mapping[ChildKey, Mapping[str, Any]],
    ) -> Outcome:
        meta = body.get("metadata") or {}
        obj = parse_serving(
            {
                "apiVersion": body.get("apiVersion"),
                "kind": body.get("kind"),
                "metadata": {**meta, "namespace": meta.get("namespace")},
                "spec": body.get("spec"),
            }
        )
        inventory = NodeInventory(tuple(sorted(nodes, key=lambda n: n.name)))
        res = resolve(obj.spec, inventory, previous_decision(body))
        outcome = Outcome(resolution=res)
        desired = render_objects(obj, res)
        desired_keys = {(o["kind"], o["metadata"]["name"]) for o in desired}
        for manifest in desired:
            key = (manifest["kind"], manifest["metadata"]["name"])
            current = live.get(key)
            if current is None or not contains(current, manifest):
                await self.kube.apply(manifest)
                metrics.APPLIES.labels(manifest["kind"]).inc()
                outcome.applied.append(f"{key[0]}/{key[1]}")
        for kind, child in live:
            if (kind, child) not in desired_keys:
                api_version = "v1" if kind == "Service" else "apps/v1"
                await self.kube.delete(api_version, kind, obj.namespace, child)
                outcome.deleted.append(f"{kind}/{child}")

        old_status = body.get("status") or {}
        status = status_dict(
            build_status(
                res,
                generation=obj.generation,
                ready_replicas=ready_replicas(res, obj, live),
                now=_now(),
                previous_conditions=old_status.get("conditions") or [],
            )
        )
        if status != old_status:
            await self.kube.patch_status(obj.namespace, obj.name, status)
            outcome.status_patched = True
        old_decision = (
            (old_status.get("resolved") or {}).get("moeBackend"),
            (old_status.get("decision") or {}).get("reason"),
        )
        if old_decision != (res.moe_backend, res.reason):
            outcome.decision_changed = True
            metrics.DECISIONS.labels(res.moe_backend, res.reason).inc()
            verb = "Decided" if old_decision == (None, None) else "Changed decision"
            self._event(
                body,
                "Normal" if res.backend_runnable else "Warning",
                "BackendResolved" if res.backend_runnable else "BackendUnrunnable",
                f"{verb}: --moe-backend {res.moe_backend} ({res.reason}); sequence parallel "
                f"{'on' if res.sequence_parallel else 'off'}; {res.message}",
            )
        return outcome

    def _event(self, body: Mapping[str, Any], etype: str, reason: str, message: str) -> None:
        if self.post_event is not None:
            try:
                self.post_event(body, etype, reason, message[:1000])
            except Exception:  # events are best effort; the status carries the same facts
                log.exception("Posting an event failed")
