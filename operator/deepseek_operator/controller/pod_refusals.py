"""Why a LeaderWorkerSet's StatefulSets cannot create pods, in their controller's words.

A Deployment copies a refused pod into its status (``ReplicaFailure``); LeaderWorkerSet does not:
its leader StatefulSet (named after it) and the per-group worker StatefulSets (``<name>-<group>``)
report a refused pod (Pod Security admission, a ResourceQuota, a webhook) only as a core/v1
``FailedCreate`` Event on the StatefulSet, while the LeaderWorkerSet stays ``Progressing``. So
for a StatefulSet that has fewer pods than it wants, the reconciler reads that Event: one LIST
per StatefulSet and resourceVersion (a StatefulSet whose pods are refused does not change while
its controller retries), re-read a few times while no Event has appeared yet.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from deepseek_operator.controller.kube import KubeClient

log = logging.getLogger("deepseek_operator.controller")

# A StatefulSet that misses pods without a FailedCreate Event yet (the Event is recorded just
# after the status is written) is looked at again this long after, at most RECHECKS times per
# resourceVersion: pods being created normally need no Event, and their StatefulSet changes.
RECHECK_S = 5.0
RECHECKS = 6
CACHE_LIMIT = 4096


def missing_pods(statefulset: Mapping[str, Any]) -> int:
    """Pods the StatefulSet wants but has not created (0 while its status lags a new spec)."""
    meta = statefulset.get("metadata") or {}
    status = statefulset.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        return 0
    wanted = (statefulset.get("spec") or {}).get("replicas")
    wanted = 1 if wanted is None else int(wanted)
    return max(0, wanted - int(status.get("replicas") or 0))


class StatefulSetRefusals:
    """Reads (and remembers) the FailedCreate Events of StatefulSets that miss pods."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        # uid -> (resourceVersion, times read, the Event's message or None)
        self._seen: dict[str, tuple[str, int, str | None]] = {}
        self._last_read: dict[str, float] = {}

    async def read(
        self, namespace: str, statefulsets: Iterable[Mapping[str, Any]]
    ) -> tuple[tuple[str, ...], float | None]:
        """``("StatefulSet/<name>: FailedCreate: <message>", ...)`` and, when a StatefulSet misses
        pods without an Event yet, the seconds after which to look again (else None)."""
        refusals: list[str] = []
        recheck: float | None = None
        for sts in sorted(statefulsets, key=lambda s: str((s.get("metadata") or {}).get("name"))):
            meta = sts.get("metadata") or {}
            uid, name = str(meta.get("uid") or ""), str(meta.get("name") or "")
            if not uid or not missing_pods(sts):
                self._seen.pop(uid, None)
                self._last_read.pop(uid, None)
                continue
            version = str(meta.get("resourceVersion") or "")
            seen_version, reads, message = self._seen.get(uid, ("", 0, None))
            if seen_version != version:
                reads, message = 0, None
            due = time.monotonic() - self._last_read.get(uid, 0.0) >= RECHECK_S
            if message is None and reads < RECHECKS and (reads == 0 or due):
                message = await self._read(namespace, uid)
                reads += 1
                self._last_read[uid] = time.monotonic()
            if len(self._seen) >= CACHE_LIMIT:
                self._seen.clear()
                self._last_read.clear()
            self._seen[uid] = (version, reads, message)
            if message:
                refusals.append(f"StatefulSet/{name}: FailedCreate: {message}")
            elif reads < RECHECKS:
                recheck = RECHECK_S
        return tuple(refusals), recheck

    async def _read(self, namespace: str, uid: str) -> str | None:
        try:
            return await self.kube.failed_create(namespace, uid)
        except Exception as exc:
            # Not worth failing the reconcile over (e.g. no right to list Events): one line.
            log.warning(
                "Cannot read FailedCreate events: %s: %s",
                type(exc).__name__,
                str(exc).splitlines()[0] if str(exc) else "",
                extra={"namespace": namespace},
            )
            return None
