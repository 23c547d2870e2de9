"""The Kueue admission check the operator serves: a prefill/decode pair admitted as one unit.

A cluster admin creates an ``AdmissionCheck`` whose ``controllerName`` is
``serving.deepseek-operator.io/pd-pair`` and lists it on the ClusterQueue. Kueue then reserves
quota for each Workload as usual but admits none before that check is ``Ready``. The operator
marks its AdmissionChecks ``Active`` (Kueue keeps a ClusterQueue with an inactive check closed)
and, whenever a serving's Workloads change, writes the check states the pure rule
(:func:`~deepseek_operator.engine.kueue.pair_check_updates`) decides: Ready on every Workload of
both roles at once, once all of them have quota reserved. docs/kueue.md has the design and its
failure modes.

Writes are server-side applies of the one list entry (``status.admissionChecks`` is a map keyed
by name, ``status.conditions`` by type), so Kueue's own entries are left as they are.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from deepseek_operator.actions.owned import ServingKey
from deepseek_operator.controller.weights import utc_now
from deepseek_operator.engine.kueue import (
    PAIR_HOLD_S,
    CheckRecord,
    CheckUpdate,
    WorkloadFacts,
    pair_check_updates,
    pair_retries,
    wanted_replicas,
)
from deepseek_operator.kube.client import KubeClient
from deepseek_operator.names import (
    KUEUE_API_VERSION,
    KUEUE_WORKLOAD_KIND,
)

log = logging.getLogger(__name__)


class PairAdmission:
    """The operator's AdmissionChecks and the check states it writes on Workloads."""

    def __init__(
        self,
        kube: KubeClient,
        workloads_of: Callable[[ServingKey], Mapping[str, tuple[WorkloadFacts, ...]]],
        children_of: Callable[[ServingKey], Mapping[tuple[str, str], Mapping[str, Any]]],
        owners: Callable[[], Iterable[ServingKey]] = tuple,
        hold_s: float = PAIR_HOLD_S,
    ) -> None:
        self.kube = kube
        self.workloads_of = workloads_of
        self.children_of = children_of
        self.owners = owners  # every serving with Workloads (a new check re-judges them all)
        self.checks: dict[str, bool] = {}  # our AdmissionChecks: name -> Active
        self._tasks: set[asyncio.Task[None]] = set()
        self.hold_s = hold_s  # how long a younger pair may hold one role's quota alone
        self._recheck: asyncio.TimerHandle | None = None  # the one timer for the next expiry

    def checks_listed(self, snapshot: Mapping[str, CheckRecord | None]) -> None:
        """A full listing of AdmissionChecks (cluster-scoped)."""
        self.checks = {}
        for record in snapshot.values():
            if record is not None:
                self.check_seen("ADDED", record[0], record)

    def check_seen(self, type_: str, key: str, record: CheckRecord | None) -> None:
        """One AdmissionCheck event: remember ours, and mark each one Active once."""
        name = key.rpartition("/")[2]
        if type_ == "DELETED" or record is None:
            self.checks.pop(name, None)
            return
        new = name not in self.checks
        self.checks[name] = record[1]
        if new:  # Workloads that already wait for it get no event of their own
            self.owners_changed(self.owners())
        if not record[1]:
            self._spawn(self._activate(name))  # its event (Active) comes back and ends this

    def owners_changed(self, owners: Iterable[ServingKey]) -> None:
        """Write the check states the Workloads of ``owners`` now call for (ours only), then
        give back quota that a younger pair holds too long (:func:`pair_retries`)."""
        if not self.checks:
            return
        ours = frozenset(self.checks)
        for namespace, name in owners:
            workloads = self.workloads_of((namespace, name))
            if not workloads:
                continue
            # Written until the Workload's own event shows it Ready (an apply is idempotent).
            for update in pair_check_updates(
                workloads, self._wanted(namespace, name, workloads), ours
            ):
                self._spawn(self._set_check(namespace, update))
        self._release_holds(ours)

    def _wanted(
        self, namespace: str, name: str, workloads: Mapping[str, tuple[WorkloadFacts, ...]]
    ) -> dict[str, int]:
        return wanted_replicas(workloads, self.children_of((namespace, name)), name)

    def _release_holds(self, ours: frozenset[str]) -> None:
        """Retry on the quota younger pairs hold while their peer has none; look again when
        the next hold expires (no Workload event marks that moment)."""
        pairs = {}
        for key in self.owners():
            workloads = self.workloads_of(key)
            if set(workloads) - {""}:
                pairs[key] = (workloads, self._wanted(key[0], key[1], workloads))
        retries = pair_retries(pairs, ours, time.time(), self.hold_s)
        for namespace, update in retries.updates:
            log.info("Kueue Workload %s/%s: %s", namespace, update.workload, update.message)
            self._spawn(self._set_check(namespace, update))
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None
        if retries.next_at is not None:
            delay = max(0.0, retries.next_at - time.time()) + 1.0
            self._recheck = asyncio.get_running_loop().call_later(delay, self._recheck_holds)

    def _recheck_holds(self) -> None:
        self._recheck = None
        if self.checks:
            self._release_holds(frozenset(self.checks))

    def _spawn(self, call: Any) -> None:
        task = asyncio.get_running_loop().create_task(call)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _activate(self, name: str) -> None:
        status = {
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": "Active",
                    "message": "the deepseek-operator admits prefill/decode pairs whole",
                    "lastTransitionTime": utc_now(),
                }
            ]
        }
        await self._apply_status("AdmissionCheck", "", name, status)

    async def _set_check(self, namespace: str, update: CheckUpdate) -> None:
        entry = {
            "name": update.check,
            "state": update.state,
            "message": update.message,
            "lastTransitionTime": utc_now(),
        }
        status = {"admissionChecks": [entry]}
        await self._apply_status(KUEUE_WORKLOAD_KIND, namespace, update.workload, status)

    async def _apply_status(
        self, kind: str, namespace: str, name: str, status: dict[str, Any]
    ) -> bool:
        meta = {"name": name, **({"namespace": namespace} if namespace else {})}
        obj = {"apiVersion": KUEUE_API_VERSION, "kind": kind, "metadata": meta, "status": status}
        try:
            await self.kube.apply_status(obj)
        except Exception as exc:  # logged; the next event of the object tries again
            log.warning("Kueue %s %s/%s: status not written: %s", kind, namespace, name, exc)
            return False
        return True
