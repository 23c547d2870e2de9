"""Why a LeaderWorkerSet cannot create its StatefulSets, or they their pods, in their
controllers' words.

A Deployment copies a refused pod into its status (``ReplicaFailure``); LeaderWorkerSet does not:
its leader StatefulSet (named after it) and the per-group worker StatefulSets (``<name>-<group>``)
report a refused pod (Pod Security admission, a ResourceQuota, a webhook) only as a core/v1
``FailedCreate`` Event on the StatefulSet, while the LeaderWorkerSet stays ``Progressing``. So
for a StatefulSet that has fewer pods than it wants, the reconciler reads that Event: one LIST
per StatefulSet and resourceVersion (a StatefulSet whose pods are refused does not change while
its controller retries), re-read a few times while no Event has appeared yet.

One level up, the LeaderWorkerSet controller itself may fail to create a StatefulSet (a
ResourceQuota on ``count/statefulsets.apps``, an admission webhook): it then records a Warning
``FailedCreate`` Event on the LeaderWorkerSet ("Failed to create leader statefulset <name>: ..."
or "Failed to create worker statefulset for leader pod <pod>: ...", LWS v0.9.0
``leaderworkerset_controller.go`` / ``pod_controller.go``) and its status does not change. So
while a StatefulSet it should have made is absent, the newest such Event about an absent one is
read the same way (keyed by the LeaderWorkerSet's resourceVersion and the StatefulSets present).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from deepseek_operator.actions.lws import absent_statefulsets, failed_target, missing_pods
from deepseek_operator.kube.client import KubeClient
from deepseek_operator.names import LWS_KIND

log = logging.getLogger("deepseek_operator.controller")

# A StatefulSet that misses pods without a FailedCreate Event yet (the Event is recorded just
# after the status is written) is looked at again this long after, at most RECHECKS times per
# resourceVersion: pods being created normally need no Event, and their StatefulSet changes.
RECHECK_S = 5.0
RECHECKS = 6

# What was read of one object (by uid): (its version, times read, the Event's message or None,
# when last read). A serving's record keeps those of its LeaderWorkerSets and StatefulSets.
Memo = dict[str, tuple[str, int, str | None, float]]


class StatefulSetRefusals:
    """Reads the FailedCreate Events of StatefulSets that miss pods (remembered in a memo)."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube

    async def read(
        self,
        namespace: str,
        statefulsets: Iterable[Mapping[str, Any]],
        leaderworkerset: Mapping[str, Any] | None,
        memo: Memo,
    ) -> tuple[tuple[str, ...], float | None]:
        """``("LeaderWorkerSet/<name>: FailedCreate: <message>", "StatefulSet/<name>:
        FailedCreate: <message>", ...)`` and, when a StatefulSet (or a pod) is missing without
        an Event yet, the seconds after which to look again (else None); ``memo`` (updated)
        says what was read before."""
        statefulsets = list(statefulsets)
        refusals: list[str] = []
        recheck: float | None = None
        if leaderworkerset is not None:
            meta = leaderworkerset.get("metadata") or {}
            absent = absent_statefulsets(leaderworkerset, statefulsets)
            present = sorted(str((s.get("metadata") or {}).get("name")) for s in statefulsets)
            version = f"{meta.get('resourceVersion')}/{','.join(present)}"
            message, again = await self._cached(
                memo, namespace, str(meta.get("uid") or ""), version, bool(absent), absent
            )
            if message:
                refusals.append(f"{LWS_KIND}/{meta.get('name')}: FailedCreate: {message}")
            recheck = recheck if again is None else again
        for sts in sorted(statefulsets, key=lambda s: str((s.get("metadata") or {}).get("name"))):
            meta = sts.get("metadata") or {}
            version = str(meta.get("resourceVersion") or "")
            message, again = await self._cached(
                memo, namespace, str(meta.get("uid") or ""), version, bool(missing_pods(sts)), None
            )
            if message:
                refusals.append(f"StatefulSet/{meta.get('name')}: FailedCreate: {message}")
            recheck = recheck if again is None else again
        return tuple(refusals), recheck

    async def _cached(
        self,
        memo: Memo,
        namespace: str,
        uid: str,
        version: str,
        missing: bool,
        targets: set[str] | None,
    ) -> tuple[str | None, float | None]:
        """The FailedCreate message of the object ``uid`` while it misses something (read once
        per ``version``, re-read a few times while there is none), and the recheck delay."""
        if not uid or not missing:
            memo.pop(uid, None)
            return None, None
        seen_version, reads, message, last_read = memo.get(uid, ("", 0, None, 0.0))
        if seen_version != version:
            reads, message = 0, None
        due = time.monotonic() - last_read >= RECHECK_S
        if message is None and reads < RECHECKS and (reads == 0 or due):
            message = await self._read(namespace, uid, targets)
            reads += 1
            last_read = time.monotonic()
        memo[uid] = (version, reads, message, last_read)
        if message:
            return message, None
        return None, (RECHECK_S if reads < RECHECKS else None)

    async def _read(self, namespace: str, uid: str, targets: set[str] | None) -> str | None:
        """The newest FailedCreate message on ``uid``; with ``targets`` (a LeaderWorkerSet), the
        newest one about a StatefulSet in ``targets`` (an Event about one that exists by now is
        history, not a reason)."""
        try:
            messages = await self.kube.failed_create(namespace, uid)
        except Exception as exc:
            # Not worth failing the reconcile over (e.g. no right to list Events): one line.
            log.warning(
                "Cannot read FailedCreate events: %s: %s",
                type(exc).__name__,
                str(exc).splitlines()[0] if str(exc) else "",
                extra={"namespace": namespace},
            )
            return None
        for message in messages:
            if targets is None or failed_target(message) in targets:
                return message
        return None
