"""The operator process's state, and what each watch event makes of it.

:class:`OperatorState` is kopf's ``memo``, passed to every handler: the API client, the
reconciler, one record per DeepSeekServing (:mod:`.records`), the owner index of children, pods
and Workloads (:mod:`deepseek_operator.actions.owned`), the node index
(:mod:`deepseek_operator.nodes.tracker`), the watches (declared in :mod:`.watches`) and the
reconcile queue (:mod:`.queue`). A DeepSeekServing event (kopf's) keeps its latest body and, for
a new object, a new generation or one first seen at start-up, reconciles it at once; resumes
(every object at a restart) wait their turn, a few at a time, so a new object is acted on at
once.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import gc
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import kopf

from deepseek_operator.actions import CHILD_DEBOUNCE_S, follow_ups
from deepseek_operator.actions.children import kept, pod_groups
from deepseek_operator.actions.owned import (
    POD,
    STATEFULSET,
    WORKLOAD,
    OwnedIndex,
    ServingKey,
    owner_of,
    within,
)
from deepseek_operator.controller import metrics
from deepseek_operator.controller.discovery import ClusterApiProbe
from deepseek_operator.controller.node_events import NodeEvents
from deepseek_operator.controller.pair_admission import PairAdmission
from deepseek_operator.controller.peering_gate import PeeringGate
from deepseek_operator.controller.queue import ReconcileQueue
from deepseek_operator.controller.reconcile import Outcome, Reconciler
from deepseek_operator.controller.records import KeptBody, Records
from deepseek_operator.controller.watches import LIST_WATCHES, POD_DEBOUNCE_S, Asks, callbacks
from deepseek_operator.engine.kueue import WorkloadFacts, workloads_by_role
from deepseek_operator.kube.client import KubeClient
from deepseek_operator.kube.credentials import Credentials
from deepseek_operator.kube.list_watch import ListWatch, WatchLoop
from deepseek_operator.names import DEFAULT_FILL_IMAGE, DEFAULT_ROUTER_IMAGE
from deepseek_operator.nodes.facts import NodeFacts
from deepseek_operator.nodes.tracker import NodeTracker

log = logging.getLogger("deepseek_operator.controller")

# Resume reconciles running at once (a restart resumes every object).
RESUME_CONCURRENCY = 4
RESUME_TRIGGER = "resume"


def _post_event(body: Mapping[str, Any], etype: str, reason: str, message: str) -> None:
    kopf.event(dict(body), type=etype, reason=reason, message=message)  # type: ignore[arg-type]


def keep_out_of_gc() -> None:
    """Exempt every object alive now (modules, the Node index, a listing's children) from the
    cyclic garbage collector's future passes.

    At 10,000 Nodes a full collection walked the whole index with the event loop stopped:
    35-75 ms each, several a second while the heap grew and more while objects were reconciled
    (5-10 ms once the index is frozen). Frozen objects are still freed by reference counting
    when they are dropped."""
    gc.freeze()


class OperatorState(NodeEvents):
    """The operator process's state: API client, reconciler, stores, watches, pending reconciles.

    It is kopf's ``memo``: kopf shallow-copies the memo for every object it handles, so
    :meth:`__copy__` returns the one instance every handler must share.
    """

    def __init__(
        self,
        compute_domain_enabled: bool = True,
        namespaces: Sequence[str] = (),
        peering: str | None = None,
        priority: int | None = None,
        credentials: Credentials | None = None,
        router_image: str = DEFAULT_ROUTER_IMAGE,
        fill_image: str = DEFAULT_FILL_IMAGE,
    ) -> None:
        self.namespaces = tuple(namespaces)  # empty: the whole cluster
        self.peering_name = peering  # None: standalone
        self.peering = PeeringGate(priority if peering else None, peering)
        self.kube = KubeClient(credentials=credentials)
        self.apis = ClusterApiProbe(self.kube, compute_domain_enabled, router_image, fill_image)
        self.records = Records()  # one per DeepSeekServing: all the operator remembers of it
        self.reconciler = Reconciler(
            self.kube,
            post_event=_post_event,
            apis_of=self.apis.current,
            apis_fresh=self.apis.fresh,
            records=self.records,
        )
        self.nodes = NodeTracker()
        # Everything watched that belongs to a serving: children, LWS StatefulSets, our LWS
        # pods, Kueue's Workloads, by owner (:mod:`deepseek_operator.actions.owned`).
        self.owned = OwnedIndex()
        self.nodes_listed = asyncio.Event()  # set once the first Node listing is in
        self.children_listed = asyncio.Event()  # set once every child watch has listed once
        self._unlisted: set[str] = set()  # child watches yet to list
        self.watch_loop: WatchLoop | None = None  # made when the watches start
        self.watches: list[ListWatch[Any]] = []
        self.crd_watches: list[tuple[str, ListWatch[Any]]] = []  # (CRD, a watch of its kind)
        self.queue = ReconcileQueue(
            lambda key, trigger, status_only: self.run_reconcile(key, trigger, status_only),
            self.records,
            lambda: self.kopf_context,
        )
        self.pair = PairAdmission(
            self.kube,
            self.workloads_of,
            self.owned.children,
            lambda: self.owned.owners_with(WORKLOAD),
        )
        # kopf's context (its settings and event queue, which ``kopf.event`` reads), captured
        # in its first DeepSeekServing handler: reconciles scheduled from our own watches run
        # in it, or posting their Events would fail.
        self.kopf_context: contextvars.Context | None = None
        # Resumes (every object, at each start) run a few at a time: a restart with 1,000
        # DeepSeekServings must not hold back an object created meanwhile.
        self.resumes = asyncio.Semaphore(RESUME_CONCURRENCY)
        for place in self.remembered():
            metrics.REMEMBERED.labels(place).set_function(
                functools.partial(lambda place: self.remembered()[place], place)
            )

    def remembered(self) -> dict[str, int]:
        """Entries held now in every place the operator keeps something per object (the
        ``deepseek_operator_remembered_entries`` gauge; the bounded deleted-uid list aside)."""
        records = self.records.items()
        return {
            "records": len(records),
            "pending": len(self.queue),
            "owners": len(self.owned.by_owner),
            "owned": len(self.owned),
            "apply_responses": sum(len(rec.applied) for _key, rec in records),
            "applies_in_flight": sum(len(rec.in_flight) for _key, rec in records),
            "parsed_specs": self.records.parsed_count(),
        }

    def __copy__(self) -> OperatorState:
        return self

    def workloads_of(self, key: ServingKey) -> dict[str, tuple[WorkloadFacts, ...]]:
        """role → the facts of ``key``'s Kueue Workloads (empty without Kueue)."""
        return workloads_by_role(r.facts for r in self.owned.of_kind(key, WORKLOAD).values())

    def body(self, key: ServingKey) -> Mapping[str, Any] | None:
        """The latest body of a DeepSeekServing (None once deleted)."""
        rec = self.records.get(key)
        return rec.body.unpacked() if rec is not None and rec.body is not None else None

    def start_watches(self) -> None:
        """Start listing and watching what :data:`LIST_WATCHES` declares (from the loop)."""
        loop = asyncio.get_running_loop()
        self.watch_loop = WatchLoop(self.kube)
        for spec in LIST_WATCHES:
            if spec.asks is Asks.NOTHING and not self.peering_name:
                continue
            for namespace in (self.namespaces or (None,)) if spec.namespaced else (None,):
                name = spec.name(namespace)
                on_listed, on_event = callbacks(self, spec, namespace, name)
                watch: ListWatch[Any] = ListWatch(
                    self.watch_loop,
                    loop,
                    spec.path(namespace),
                    spec.reduce,
                    on_listed,
                    on_event,
                    label_selector=spec.selector,
                    name=name,
                    kind=spec.kind,
                )
                self.watches.append(watch)
                if spec.child or spec.kind in ("StatefulSet", "ResourceSlice", "ResourceClaim"):
                    self._unlisted.add(name)  # every reconcile waits for their listing
                if spec.crd is not None:
                    self.crd_watches.append((spec.crd, watch))
        for watch in self.watches:
            watch.start()

    def stop_watches(self) -> None:
        """Close every watch."""
        for watch in self.watches:
            watch.stop()
        if self.watch_loop is not None:
            self.watch_loop.close()

    def crd_installed(self, crd: str) -> None:
        """An add-on CRD came: its child watches ask for the kind again now."""
        for served_by, watch in self.crd_watches:
            if served_by == crd:
                watch.poke()

    def pods_changed(self, owners: set[ServingKey]) -> None:
        """Refresh the status of the DeepSeekServings whose group pods (or Kueue Workloads)
        changed (status only), and their pair's admission check."""
        self.pair.owners_changed(owners)
        for owner in owners:
            if self.records.live_uid(owner) is not None:
                self.schedule(owner, delay=POD_DEBOUNCE_S, trigger="pods", status_only=True)

    def nodes_seen(self, listed: dict[str, NodeFacts]) -> None:
        """A full Node listing (at start, or after the watch expired)."""
        changes = self.nodes.replace_all(listed)
        metrics.NODES.set(len(self.nodes))
        keep_out_of_gc()
        if self.nodes_listed.is_set():
            self.nodes_changed(changes)
        self.nodes_listed.set()

    def owned_listed(
        self, kind: str, namespace: str | None, watch: str, listed: dict[str, Any]
    ) -> None:
        """A full listing of ``kind`` in ``namespace`` (None: every namespace) for the owner
        index, at start or after its watch expired."""
        changed = self.owned.replace(
            lambda k: k[0] == kind and within(namespace, k[1]),
            {(kind, k): (owner_of(kind, k, v), v) for k, v in listed.items() if v is not None},
        )
        if kind in (POD, WORKLOAD):
            self.pods_changed(changed)
        else:
            self._listed(watch, changed)

    def _listed(self, watch: str, changed: set[ServingKey]) -> None:
        """A child watch's full listing is in: once every one has listed, children are known;
        after that, a relisting reconciles the owners whose children it changed."""
        if self.children_listed.is_set():
            for owner in changed:
                self._owner_changed(owner)
        self._unlisted.discard(watch)
        if not self._unlisted:
            keep_out_of_gc()
            self.children_listed.set()

    def owned_seen(self, kind: str, type_: str, key: str, value: Any) -> None:
        """One event for the owner index: a pod or Workload asks for a status reconcile of
        its serving; a child (readiness, a hand edit, a deletion) or a LeaderWorkerSet's
        StatefulSet (its refused pods surface as ``PodsRefused``) reconciles its owner."""
        deleted = type_ == "DELETED"
        labelled = owner_of(kind, key, value)
        changed = self.owned.put((kind, key), None if deleted else labelled, value)
        if kind in (POD, WORKLOAD):
            self.pods_changed(changed)
            return
        owner = labelled or next(iter(changed), None)  # its owner by label, else the one it had
        if owner is None:
            return
        namespace, _, name = key.partition("/")
        if deleted:
            self.records.child_deleted(namespace, kind, name, owner[1])
        if not deleted and self.records.child_observed(namespace, owner[1], kind, name, value):
            return  # the watch echoing our own apply
        self._owner_changed(owner)

    def _owner_changed(self, key: ServingKey) -> None:
        # Garbage collection deleting the children of a deleted owner is no reason to reconcile it.
        if self.records.live_uid(key) is not None:
            self.schedule(key, delay=CHILD_DEBOUNCE_S, trigger="child")

    def serving_seen(self, type_: str | None, body: Mapping[str, Any]) -> str | None:
        """Keep a DeepSeekServing's latest body; the reason to reconcile it now, if any.

        ``type_`` is the watch event's type (None: kopf's initial listing). The answer is
        ``resume`` (first seen at start-up), ``create`` (a new uid), ``update`` (a new
        generation: the spec changed) or None (a status echo, a metadata change, a deletion,
        an object being deleted). A deleted object ends its work now (no zombie reconciles).
        """
        if self.kopf_context is None:
            self.kopf_context = contextvars.copy_context()
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        uid = str(meta.get("uid") or "")
        if type_ == "DELETED":
            self.forget(key, uid)
            return None
        if self.reconciler.is_gone(body):
            return None  # a late event of an object already deleted
        rec = self.records.ensure(key)
        rec.body = KeptBody.of(kept(body))
        self.records.serving_observed(key, body)
        if meta.get("deletionTimestamp"):
            return None  # finalizers of others hold it; nothing of ours to do
        seen = (uid, int(meta.get("generation") or 0))
        before = rec.handled
        if before == seen:
            return None
        rec.handled = seen
        if type_ is None:
            return RESUME_TRIGGER
        return "update" if before is not None and before[0] == uid else "create"

    async def reconcile(
        self, key: ServingKey, trigger: str, status_only: bool = False
    ) -> Outcome | None:
        """Reconcile ``key`` with whatever the stores hold once its turn comes."""
        await self.nodes_listed.wait()  # never decide on a partial inventory
        await self.children_listed.wait()  # nor on a partial view of what exists
        return await self.reconciler.reconcile(
            key,
            lambda: self.body(key),
            self.nodes.inventory,
            lambda: self.owned.children(key),
            trigger,
            statefulsets_of=lambda: list(self.owned.of_kind(key, STATEFULSET).values()),
            groups_of=lambda: pod_groups(self.owned.of_kind(key, POD).values()),
            status_only=status_only,
            workloads_of=lambda: self.workloads_of(key),
        )

    def schedule(
        self, key: ServingKey, delay: float, trigger: str, status_only: bool = False
    ) -> None:
        """Reconcile ``key`` in ``delay`` seconds (folding into a pending one: :mod:`.queue`)."""
        self.queue.schedule(key, delay, trigger, status_only=status_only)

    async def run_reconcile(self, key: ServingKey, trigger: str, status_only: bool = False) -> None:
        """Reconcile ``key`` now and schedule what its outcome asks for (a retry after an error
        or a refusal, a recheck, another look at children that changed while we wrote them).

        Never raises: a failure is one log line (no traceback) and a retry. Resumes (every
        object at a restart) run :data:`RESUME_CONCURRENCY` at a time, so an object created
        meanwhile does not wait behind them all."""
        if trigger == RESUME_TRIGGER:
            async with self.resumes:
                await self._run_reconcile(key, trigger, status_only)
        else:
            await self._run_reconcile(key, trigger, status_only)

    async def _run_reconcile(self, key: ServingKey, trigger: str, status_only: bool) -> None:
        if not self.peering.active():
            # A standby: kopf paused this instance, another one acts. Should this one take
            # over, the object's next event or listing must be reconciled, not taken as seen.
            rec = self.records.get(key)
            if rec is not None:
                rec.handled = None
            return
        try:
            outcome = await self.reconcile(key, trigger=trigger, status_only=status_only)
        except Exception as exc:
            log.error(
                "Reconcile failed: %s: %s",
                type(exc).__name__,
                exc,
                extra={"namespace": key[0], "name_": key[1], "trigger": trigger},
            )
            self.queue.retry_after_error(key, status_only)
            return
        if outcome is None:
            return
        self.queue.follow_up(
            key,
            follow_ups(
                retry_after=outcome.retry_after,
                recheck_after=outcome.recheck_after,
                changed_meanwhile=outcome.children_changed_meanwhile,
            ),
        )

    def forget(self, key: ServingKey, uid: str) -> None:
        """``key`` was deleted: cancel its pending reconcile and drop its record."""
        self.queue.cancel(key)
        self.reconciler.gone(key, uid)
