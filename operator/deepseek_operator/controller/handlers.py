"""kopf handlers: thin glue between watch events and :class:`Reconciler`.

* Node facts and our children come from :class:`ListWatch` threads (one LIST at start, then a
  WATCH; not kopf indexes, whose initial listing costs O(objects²)); every reconcile waits
  until the first listings are in. DeepSeekServings' latest bodies are kept from kopf's own
  events of them. A reconcile therefore makes no LIST call.
* DeepSeekServings come from one kopf event handler (no kopf create/update/resume handlers, so
  kopf writes no bookkeeping annotation: one PATCH less per object). A new object (new uid), a
  new generation, or an object first seen at start-up (resume) is reconciled at once, in that
  handler; a status echo or a metadata-only change is not. Resumes (every object at a restart)
  wait their turn, a few at a time, so a new object is acted on at once.
* A Node change that alters GPU facts, labels, taints, readiness or allocatable GPUs re-evaluates
  only the DeepSeekServings whose ``nodeSelector`` matches the node (before or after), debounced
  so a burst of node changes costs one reconcile per object.
* A child event (readiness, hand edit, deletion) reconciles its owner; the echo of our own
  apply (the very version it returned) does not. So does an event of a StatefulSet our
  LeaderWorkerSet made (its refused pods surface as ``PodsRefused``; watched, never written).
* Our LeaderWorkerSet pods come from :func:`pod_watch` (label-selected, per watched namespace or
  cluster-wide; only name, node and readiness kept): a change asks for a *status-only*
  reconcile of their owner (``status.groups``), which never writes a child.
The process's state (:class:`OperatorState`) is kopf's ``memo``, passed to every handler.
Handlers return nothing: kopf would otherwise write results into ``status``, which the
structural schema prunes.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import gc
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kopf

from deepseek_operator.actions import BACKOFF_TRIGGER, CHILD_DEBOUNCE_S, RECHECK_TRIGGER, follow_ups
from deepseek_operator.controller import metrics
from deepseek_operator.controller.kube import KubeClient, group_version_prefix
from deepseek_operator.controller.list_watch import ListWatch
from deepseek_operator.controller.node_tracker import NodeChange, NodeTracker
from deepseek_operator.controller.node_watch import node_watch
from deepseek_operator.controller.peering_gate import PeeringGate
from deepseek_operator.controller.pod_watch import PodGroups, PodKey, PodRecord, pod_watch
from deepseek_operator.controller.reconcile import Outcome, Reconciler
from deepseek_operator.controller.records import Records
from deepseek_operator.engine.cluster_apis import ClusterApis
from deepseek_operator.names import (
    COMPUTE_DOMAIN_API_VERSION,
    COMPUTE_DOMAIN_KIND,
    GROUP,
    KOPF_ANNOTATION_PREFIX,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LWS_API_VERSION,
    LWS_KIND,
    LWS_NAME_LABEL,
    MANAGED_BY,
    PLURAL,
    VERSION,
)
from deepseek_operator.nodes.facts import NodeFacts
from deepseek_operator.plan import ChildKey

log = logging.getLogger("deepseek_operator.controller")

NODE_DEBOUNCE_S = 1.0
POD_DEBOUNCE_S = 1.0
API_RECHECK_S = 30.0
LWS_GROUP, LWS_VERSION = LWS_API_VERSION.split("/")
CD_GROUP, CD_VERSION = COMPUTE_DOMAIN_API_VERSION.split("/")
LWS_CRD = f"leaderworkersets.{LWS_GROUP}"
CD_CRD = f"computedomains.{CD_GROUP}"
ADDON_CRDS = (LWS_CRD, CD_CRD)
# A failed scheduled reconcile may see no watch event again (e.g. a new CRD whose REST path
# discovery did not list yet): it is tried again after this long, as kopf does for handlers.
BACKOFF_AFTER_ERROR_S = 10.0
# kopf peering: a peer whose heartbeat is older than this is dead, so a standby operator takes
# over within about this long after the active one is killed (kopf's default is 60 s).
PEERING_LIFETIME_S = 8
# Earlier versions let kopf keep its last-handled configuration (a copy of the spec) in this
# annotation; objects they handled still carry it, and the stores drop it.
KOPF_DIFFBASE_ANNOTATION = f"{KOPF_ANNOTATION_PREFIX}/last-handled-configuration"
# Resume reconciles running at once (a restart resumes every object).
RESUME_CONCURRENCY = 4
# Triggers that only follow up on an earlier reconcile: a watch event folded into a pending
# follow-up names the reconcile instead (metrics and logs say why it ran).
FOLLOW_UPS = frozenset({RECHECK_TRIGGER, BACKOFF_TRIGGER, "retry"})

ServingKey = tuple[str, str]  # (namespace, name)


def _post_event(body: Mapping[str, Any], etype: str, reason: str, message: str) -> None:
    kopf.event(dict(body), type=etype, reason=reason, message=message)  # type: ignore[arg-type]


class Stores:
    """What the operator knows of DeepSeekServings and their children, kept from watch events.

    ``children``: (namespace, owner) → (kind, name) → the live body (the child watches).
    """

    def __init__(self) -> None:
        self.children: dict[ServingKey, dict[ChildKey, dict[str, Any]]] = {}
        # (namespace, LeaderWorkerSet name) → namespace/name → a StatefulSet it made (reduced)
        self.statefulsets: dict[ServingKey, dict[str, dict[str, Any]]] = {}
        # (kind, namespace/name) → its owner, to move or drop an entry whatever its labels say now
        self._owner_of: dict[tuple[str, str], ServingKey] = {}

    def lws_statefulsets(self, key: ServingKey) -> list[dict[str, Any]]:
        """The StatefulSets of the LeaderWorkerSet named like ``key`` (read, never written)."""
        return list((self.statefulsets.get(key) or {}).values())

    def statefulset_seen(self, key: str, body: dict[str, Any] | None) -> ServingKey | None:
        """Record a LeaderWorkerSet's StatefulSet (``body`` None: deleted); that LWS's key."""
        namespace = key.partition("/")[0]
        owner = ((body or {}).get("metadata") or {}).get("labels", {}).get(LWS_NAME_LABEL)
        for lws, sets in list(self.statefulsets.items()):  # at most one holds it
            if key in sets and (body is None or lws != (namespace, owner)):
                del sets[key]
                if not sets:
                    del self.statefulsets[lws]
                if body is None:
                    return lws
        if body is None or not owner:
            return None
        lws = (namespace, str(owner))
        self.statefulsets.setdefault(lws, {})[key] = body
        return lws

    def statefulsets_listed(self, snapshot: Mapping[str, dict[str, Any]]) -> set[ServingKey]:
        """Replace every StatefulSet with ``snapshot``; the LeaderWorkerSets whose sets changed."""
        before = {
            (lws, key): _rv_text(body)
            for lws, sets in self.statefulsets.items()
            for key, body in sets.items()
        }
        self.statefulsets = {}
        for key, body in snapshot.items():
            self.statefulset_seen(key, body)
        after = {
            (lws, key): _rv_text(body)
            for lws, sets in self.statefulsets.items()
            for key, body in sets.items()
        }
        return {lws for (lws, _key), _rv in set(before.items()) ^ set(after.items())}

    def live_children(self, key: ServingKey) -> dict[ChildKey, dict[str, Any]]:
        """The DeepSeekServing's children as the watches last saw them."""
        return dict(self.children.get(key) or {})

    def child_seen(self, kind: str, key: str, body: dict[str, Any] | None) -> ServingKey | None:
        """Record a child (``body`` None: deleted); its owner (before or after), if any."""
        namespace, _, name = key.partition("/")
        before = self._owner_of.pop((kind, key), None)
        if before is not None:
            entries = self.children.get(before) or {}
            entries.pop((kind, name), None)
            if not entries:
                self.children.pop(before, None)
        owner = _owner(body) if body is not None else None
        if owner is None or body is None:
            return before
        after = (namespace, owner)
        self.children.setdefault(after, {})[(kind, name)] = body
        self._owner_of[(kind, key)] = after
        return after

    def children_listed(self, kind: str, snapshot: Mapping[str, dict[str, Any]]) -> set[ServingKey]:
        """Replace every child of ``kind`` with ``snapshot``; the owners whose children changed."""
        changed: set[ServingKey] = set()
        for child_kind, key in [k for k in self._owner_of if k[0] == kind]:
            if key not in snapshot:
                owner = self.child_seen(child_kind, key, None)
                if owner is not None:
                    changed.add(owner)
        for key, body in snapshot.items():
            owner = self._owner_of.get((kind, key))
            old = (
                (self.children.get(owner) or {}).get((kind, key.partition("/")[2]))
                if owner
                else None
            )
            if old is None or _rv_text(old) != _rv_text(body):
                now = self.child_seen(kind, key, body)
                changed.update(o for o in (owner, now) if o is not None)
        return changed


def _owner(body: Mapping[str, Any]) -> str | None:
    owner = ((body.get("metadata") or {}).get("labels") or {}).get(LABEL_INSTANCE)
    return str(owner) if owner else None


def _rv_text(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("resourceVersion") or "")


@dataclass(frozen=True)
class ChildKind:
    """One kind of child the operator creates, and where its objects are listed."""

    kind: str
    api_version: str
    plural: str
    crd: str | None = None  # the add-on CRD that serves it (None: built in)

    def path(self, namespace: str | None) -> str:
        """The collection in ``namespace`` (None: the whole cluster)."""
        scope = f"/namespaces/{namespace}" if namespace else ""
        return f"{group_version_prefix(self.api_version)}{scope}/{self.plural}"


CHILD_KINDS = (
    ChildKind("Deployment", "apps/v1", "deployments"),
    ChildKind("Service", "v1", "services"),
    ChildKind(LWS_KIND, LWS_API_VERSION, "leaderworkersets", LWS_CRD),
    ChildKind(COMPUTE_DOMAIN_KIND, COMPUTE_DOMAIN_API_VERSION, "computedomains", CD_CRD),
)
CHILD_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
# StatefulSets LeaderWorkerSet makes (leader and per-group workers) carry its name, not our labels.
LWS_STATEFULSETS = ChildKind("StatefulSet", "apps/v1", "statefulsets")


def reduced_statefulset(body: Mapping[str, Any]) -> dict[str, Any]:
    """A LeaderWorkerSet's StatefulSet, reduced to what pod refusals need."""
    meta = body.get("metadata") or {}
    kept_meta = {
        k: meta.get(k) for k in ("name", "namespace", "uid", "generation", "resourceVersion")
    }
    kept_meta["labels"] = {LWS_NAME_LABEL: (meta.get("labels") or {}).get(LWS_NAME_LABEL)}
    return {
        "metadata": kept_meta,
        "spec": {"replicas": (body.get("spec") or {}).get("replicas")},
        "status": dict(body.get("status") or {}),
    }


class ClusterApiProbe:
    """What add-on APIs the cluster serves.

    The add-on CRDs' own watch events are authoritative (a CRD with ``Established=True`` is
    served; a deleted one is not): :meth:`crd_seen` records them. For a CRD no event has told
    about yet, discovery answers, re-checked at most every :data:`API_RECHECK_S` seconds.
    """

    def __init__(self, kube: KubeClient, compute_domain_enabled: bool) -> None:
        self.kube = kube
        self.compute_domain_enabled = compute_domain_enabled
        self._checked_at = -API_RECHECK_S
        self._discovered: dict[str, bool] = {}
        self._established: dict[str, bool] = {}  # CRD name -> Established, from its events

    def crd_seen(self, name: str, body: Mapping[str, Any] | None) -> None:
        """An add-on CRD's event (``body`` None: deleted)."""
        conditions = ((body or {}).get("status") or {}).get("conditions") or []
        self._established[name] = body is not None and any(
            c.get("type") == "Established" and c.get("status") == "True" for c in conditions
        )
        self.kube.forget_resources()  # its REST path may have come or gone

    def current(self) -> ClusterApis:
        """What is served now (runs in a worker thread: discovery may block)."""
        now = time.monotonic()
        if now - self._checked_at >= API_RECHECK_S:
            self.kube.forget_resources()
            self._discovered = {
                LWS_CRD: self.kube.served(LWS_API_VERSION, LWS_KIND),
                CD_CRD: self.kube.served(COMPUTE_DOMAIN_API_VERSION, COMPUTE_DOMAIN_KIND),
            }
            self._checked_at = now
        return self._answer()

    def fresh(self) -> ClusterApis | None:
        """What is served, when discovery need not be asked again (None: call :meth:`current`).

        Never blocks, so a reconcile on the event loop needs no thread for it.
        """
        if time.monotonic() - self._checked_at >= API_RECHECK_S:
            return None
        return self._answer()

    def _answer(self) -> ClusterApis:
        def served(crd: str) -> bool:
            known = self._established.get(crd)
            return known if known is not None else self._discovered.get(crd, False)

        return ClusterApis(
            leader_worker_set=served(LWS_CRD),
            compute_domain=served(CD_CRD),
            compute_domain_enabled=self.compute_domain_enabled,
        )


@dataclass
class PendingReconcile:
    """A reconcile waiting for its time: the task, when it is due (loop time), and why."""

    task: asyncio.Task[None]
    due: float
    trigger: str


class OperatorState:
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
    ) -> None:
        self.namespaces = tuple(namespaces)  # empty: the whole cluster
        self.peering_name = peering  # None: standalone
        self.peering = PeeringGate(priority if peering else None)
        # One kept connection per writer thread plus one per open watch.
        scopes = max(1, len(self.namespaces))
        watches = 1 + (len(CHILD_KINDS) + 2) * scopes + (scopes if peering else 0)
        self.kube = KubeClient(extra_connections=watches)
        self.apis = ClusterApiProbe(self.kube, compute_domain_enabled)
        self.records = Records()  # one per DeepSeekServing: all the operator remembers of it
        self.reconciler = Reconciler(
            self.kube,
            post_event=_post_event,
            apis_of=self.apis.current,
            apis_fresh=self.apis.fresh,
            records=self.records,
        )
        self.nodes = NodeTracker()
        self.stores = Stores()
        self.nodes_listed = asyncio.Event()  # set once the first Node listing is in
        self.children_listed = asyncio.Event()  # set once every child watch has listed once
        self._unlisted: set[str] = set()  # child watches yet to list
        self.watches: list[ListWatch[Any]] = []
        self.child_watches: list[tuple[ChildKind, ListWatch[dict[str, Any]]]] = []
        self.pending: dict[ServingKey, PendingReconcile] = {}
        self.full_wanted: set[ServingKey] = set()  # a pending reconcile may write children
        self.pods = PodGroups()
        # kopf's context (its settings and event queue, which ``kopf.event`` reads), captured
        # in its first DeepSeekServing handler: reconciles scheduled from our own watches run
        # in it, or posting their Events would fail.
        self.kopf_context: contextvars.Context | None = None
        # Resumes (every object, at each start) run a few at a time: a restart with 1,000
        # DeepSeekServings must not hold back an object created meanwhile.
        self.resumes = asyncio.Semaphore(RESUME_CONCURRENCY)

    def __copy__(self) -> OperatorState:
        return self

    def body(self, key: ServingKey) -> Mapping[str, Any] | None:
        """The latest body of a DeepSeekServing (None once deleted)."""
        rec = self.records.get(key)
        return rec.body if rec is not None else None

    def start_watches(self) -> None:
        """Start listing and watching Nodes and our children (from the running event loop)."""
        loop = asyncio.get_running_loop()
        self.watches.append(node_watch(self.kube, loop, self.nodes_seen, self.node_seen))
        for child in CHILD_KINDS:
            for namespace in self.namespaces or (None,):
                name = f"{child.kind}-watch" + (f"-{namespace}" if namespace else "")
                self._unlisted.add(name)
                watch: ListWatch[dict[str, Any]] = ListWatch(
                    self.kube,
                    loop,
                    child.path(namespace),
                    _kept,
                    functools.partial(self.children_seen, child.kind, name),
                    functools.partial(self.child_seen, child.kind),
                    label_selector=CHILD_SELECTOR,
                    name=name,
                )
                self.watches.append(watch)
                self.child_watches.append((child, watch))
        for namespace in self.namespaces or (None,):
            name = "StatefulSet-watch" + (f"-{namespace}" if namespace else "")
            self._unlisted.add(name)
            self.watches.append(
                ListWatch(
                    self.kube,
                    loop,
                    LWS_STATEFULSETS.path(namespace),
                    reduced_statefulset,
                    functools.partial(self.statefulsets_seen, name),
                    self.statefulset_seen,
                    label_selector=LWS_NAME_LABEL,
                    name=name,
                )
            )
        if self.peering_name:
            for namespace in self.namespaces or (None,):
                path = (
                    f"/apis/kopf.dev/v1/namespaces/{namespace}/kopfpeerings"
                    if namespace
                    else "/apis/kopf.dev/v1/clusterkopfpeerings"
                )
                self.watches.append(
                    ListWatch(
                        self.kube,
                        loop,
                        path,
                        lambda obj: obj,
                        self._peerings_listed,
                        self._peering_seen,
                        name="peering-watch",
                    )
                )
        for namespace in self.namespaces or (None,):
            self.watches.append(
                pod_watch(self.kube, loop, namespace, self.pods_listed, self.pod_seen)
            )
        for watch in self.watches:
            watch.start()

    def _ours(self, key: str) -> bool:
        return key.rpartition("/")[2] == self.peering_name

    def _peerings_listed(self, listed: dict[str, dict[str, Any]]) -> None:
        self.peering.listed_all({k: v for k, v in listed.items() if self._ours(k)})

    def _peering_seen(self, kind: str, key: str, obj: dict[str, Any]) -> None:
        if self._ours(key):
            self.peering.seen(kind, key, obj)

    def stop_watches(self) -> None:
        """Close every watch."""
        for watch in self.watches:
            watch.stop()

    def crd_installed(self, crd: str) -> None:
        """An add-on CRD came: its child watches ask for the kind again now."""
        for child, watch in self.child_watches:
            if child.crd == crd:
                watch.poke()

    def pods_listed(self, namespace: str | None, snapshot: dict[PodKey, PodRecord]) -> None:
        """A full listing of our LWS pods in ``namespace`` (None: every namespace)."""
        self.pods_changed(self.pods.replace(namespace, snapshot))

    def pod_seen(self, key: PodKey, record: PodRecord | None) -> None:
        """One pod event (``record`` None: deleted)."""
        self.pods_changed(self.pods.observe(key, record))

    def pods_changed(self, owners: set[ServingKey]) -> None:
        """Refresh the status of the DeepSeekServings whose group pods changed (status only)."""
        for owner in owners:
            if self.body(owner) is not None:
                self.schedule(owner, delay=POD_DEBOUNCE_S, trigger="pods", status_only=True)

    def nodes_seen(self, listed: dict[str, NodeFacts]) -> None:
        """A full Node listing (at start, or after the watch expired)."""
        changes = self.nodes.replace_all(listed)
        metrics.NODES.set(len(self.nodes))
        keep_out_of_gc()
        if self.nodes_listed.is_set():
            self.nodes_changed(changes)
        self.nodes_listed.set()

    def node_seen(self, name: str, facts: NodeFacts | None) -> None:
        """One Node event (``facts`` None: deleted)."""
        change = self.nodes.observe(name, facts)
        if change is None:
            return  # a heartbeat or another change the decision does not read
        metrics.NODES.set(len(self.nodes))
        if self.nodes_listed.is_set():
            self.nodes_changed([change])

    def nodes_changed(self, changes: list[NodeChange]) -> None:
        """Re-evaluate the DeepSeekServings these node changes can affect (and only those)."""
        if not changes:
            return
        for key, serving in self.records.bodies():
            if self.reconciler.is_gone(serving):
                continue
            selector = (serving.get("spec") or {}).get("nodeSelector") or {}
            if any(change.may_affect(selector) for change in changes):
                self.schedule(key, delay=NODE_DEBOUNCE_S, trigger="nodes")

    def children_seen(self, kind: str, watch: str, listed: dict[str, dict[str, Any]]) -> None:
        """A full listing of one child kind (at start, or after its watch expired)."""
        changed = self.stores.children_listed(kind, listed)
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

    def child_seen(self, kind: str, type_: str, key: str, body: dict[str, Any]) -> None:
        """One event of a child: readiness, a hand edit, a deletion: reconcile its owner."""
        deleted = type_ == "DELETED"
        namespace, _, name = key.partition("/")
        owner = self.stores.child_seen(kind, key, None if deleted else body)
        if deleted:
            self.reconciler.child_deleted(namespace, kind, name, owner[1] if owner else None)
        if owner is None:
            return
        if not deleted and self.reconciler.child_observed(namespace, owner[1], kind, name, body):
            return  # the watch echoing our own apply
        self._owner_changed(owner)

    def statefulsets_seen(self, watch: str, listed: dict[str, dict[str, Any]]) -> None:
        """A full listing of LeaderWorkerSets' StatefulSets."""
        changed = self.stores.statefulsets_listed(listed)
        self._listed(watch, changed)

    def statefulset_seen(self, type_: str, key: str, body: dict[str, Any]) -> None:
        """A StatefulSet of a LeaderWorkerSet changed: reconcile the DeepSeekServing it serves,
        if any (our LeaderWorkerSet is named after it), so pods its controller cannot create
        surface as ``PodsRefused``."""
        lws = self.stores.statefulset_seen(key, None if type_ == "DELETED" else body)
        if lws is not None:
            self._owner_changed(lws)

    def _owner_changed(self, key: ServingKey) -> None:
        body = self.body(key)
        # Garbage collection deleting the children of a deleted owner is no reason to reconcile it.
        if body is not None and not self.reconciler.is_gone(body):
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
        rec.body = _kept(body)
        self.reconciler.serving_observed(key, body)
        if meta.get("deletionTimestamp"):
            return None  # finalizers of others hold it; nothing of ours to do
        seen = (uid, int(meta.get("generation") or 0))
        before = rec.handled
        if before == seen:
            return None
        rec.handled = seen
        if type_ is None:
            return "resume"
        return "update" if before is not None and before[0] == uid else "create"

    async def reconcile(
        self, key: ServingKey, trigger: str, status_only: bool = False
    ) -> Outcome | None:
        """Reconcile ``key`` with whatever the stores hold once its turn comes."""
        await self.nodes_listed.wait()  # never decide on a partial inventory
        await self.children_listed.wait()  # nor on a partial view of what exists
        stores = self.stores
        return await self.reconciler.reconcile(
            key,
            lambda: self.body(key),
            self.nodes.inventory,
            lambda: stores.live_children(key),
            trigger,
            statefulsets_of=lambda: stores.lws_statefulsets(key),
            groups_of=lambda: self.pods.groups(key),
            status_only=status_only,
        )

    def schedule(
        self, key: ServingKey, delay: float, trigger: str, status_only: bool = False
    ) -> None:
        """Reconcile in ``delay`` seconds; events arriving meanwhile fold into the same
        reconcile, which writes children unless every event that asked for it wanted the status
        only (pod events). An event due sooner than the pending reconcile brings it forward."""
        widens = not status_only and key not in self.full_wanted
        if not status_only:
            self.full_wanted.add(key)
        due = asyncio.get_running_loop().time() + delay
        pending = self.pending.get(key)
        if pending is not None and not pending.task.done():
            # The reconcile is named after the first event that asked for all it will do: a
            # follow-up, or a status-only ask that a full one widens, yields its name.
            if widens or (pending.trigger in FOLLOW_UPS and trigger not in FOLLOW_UPS):
                pending.trigger = trigger
            if due >= pending.due:
                return
            pending.task.cancel()  # still asleep (a running one has left ``pending``)
            trigger = pending.trigger

        async def later() -> None:
            await asyncio.sleep(delay)
            record = self.pending.pop(key)
            only_status = key not in self.full_wanted
            self.full_wanted.discard(key)
            await self.run_reconcile(key, record.trigger, status_only=only_status)

        context = self.kopf_context.copy() if self.kopf_context is not None else None
        task = asyncio.create_task(later(), context=context)
        self.pending[key] = PendingReconcile(task, due, trigger)

    async def run_reconcile(self, key: ServingKey, trigger: str, status_only: bool = False) -> None:
        """Reconcile ``key`` now and schedule what its outcome asks for (a retry after an error
        or a refusal, a recheck, another look at children that changed while we wrote them).

        Never raises: a failure is one log line (no traceback) and a retry."""
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
            self.schedule(key, BACKOFF_AFTER_ERROR_S, trigger="retry", status_only=status_only)
            return
        if outcome is None:
            return
        for follow_up in follow_ups(
            retry_after=outcome.retry_after,
            recheck_after=outcome.recheck_after,
            changed_meanwhile=outcome.children_changed_meanwhile,
        ):
            self.schedule(key, follow_up.delay, trigger=follow_up.trigger)

    def forget(self, key: ServingKey, uid: str) -> None:
        """``key`` was deleted: cancel its pending reconcile and drop what we know about it."""
        pending = self.pending.pop(key, None)
        if pending is not None and not pending.task.done():
            pending.task.cancel()
        self.full_wanted.discard(key)
        self.reconciler.gone(key, uid)


def keep_out_of_gc() -> None:
    """Exempt every object alive now (modules, the Node index, a listing's children) from the
    cyclic garbage collector's future passes.

    At 10,000 Nodes a full collection walked the whole index with the event loop stopped:
    35-75 ms each, several a second while the heap grew and more while objects were reconciled
    (5-10 ms once the index is frozen). Frozen objects are still freed by reference counting
    when they are dropped."""
    gc.freeze()


class NoDiffBase(kopf.DiffBaseStorage):
    """No last-handled state: every handler here is an event handler, which takes no diff.

    kopf computes a diff for every event regardless, from a deep copy of the whole body
    (``managedFields`` included), about a sixth of the operator's time in a burst of creates."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        """An empty essence (nothing is compared)."""
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        """Nothing was stored."""
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        """Nothing is stored (kopf calls this only for change handlers, of which we have none)."""


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: OperatorState, **_: Any) -> None:
    """Peering, logging and watching settings; then start our own watches (API writes run on
    the :class:`WriteQueue` threads, not on the loop's default executor)."""
    # Two replicas without their peering object would both act: refuse to run instead.
    settings.peering.mandatory = not settings.peering.standalone
    settings.peering.lifetime = PEERING_LIFETIME_S
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.execution.max_workers = 16
    settings.persistence.diffbase_storage = NoDiffBase()
    keep_out_of_gc()  # everything imported and configured so far lives as long as the process
    memo.start_watches()


@kopf.on.cleanup()
async def stop_watching(memo: OperatorState, **_: Any) -> None:
    """Close the Node and child watches."""
    memo.stop_watches()


def _kept(body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` as the stores keep it: without ``metadata.managedFields``, which nothing here
    reads and which, for server-side-applied objects, is about as large as the object itself
    (1,000 DeepSeekServings: their Deployments, Services and bodies held twice over), and
    without kopf's last-handled configuration (a second copy of a DeepSeekServing's spec)."""
    kept = dict(body)
    meta = kept.get("metadata")
    if isinstance(meta, Mapping):
        annotations = meta.get("annotations") or {}
        if "managedFields" in meta or KOPF_DIFFBASE_ANNOTATION in annotations:
            meta = {k: v for k, v in meta.items() if k != "managedFields"}
            if KOPF_DIFFBASE_ANNOTATION in annotations:
                meta["annotations"] = {
                    k: v for k, v in annotations.items() if k != KOPF_DIFFBASE_ANNOTATION
                }
            kept["metadata"] = meta
    return kept


# --- DeepSeekServing ----------------------------------------------------------------------------


@kopf.on.event(GROUP, VERSION, PLURAL)
async def serving_event(type: str | None, body: kopf.Body, memo: OperatorState, **_: Any) -> None:
    """Every event of a DeepSeekServing: keep its latest body and, for a new object, a new
    generation or one first seen at start-up, reconcile it now (resumes a few at a time)."""
    trigger = memo.serving_seen(type, body)
    if trigger is None:
        return
    meta = body.get("metadata") or {}
    key = (str(meta.get("namespace")), str(meta.get("name")))
    if trigger == "resume":
        async with memo.resumes:
            await memo.run_reconcile(key, trigger)
    else:
        await memo.run_reconcile(key, trigger)


# --- add-on CRDs (LeaderWorkerSet, ComputeDomain) ------------------------------------------------


@kopf.on.event("apiextensions.k8s.io", "v1", "customresourcedefinitions")
async def addon_crd_changed(
    name: str, type: str, body: kopf.Body, memo: OperatorState, **_: Any
) -> None:
    """LeaderWorkerSet or ComputeDomain installed, established or removed: decide again."""
    if name not in ADDON_CRDS:
        return
    memo.apis.crd_seen(name, None if type == "DELETED" else body)
    if type != "DELETED":
        memo.crd_installed(name)
    if type is None:  # the initial listing: resume reconciles every DeepSeekServing anyway
        return
    for key, _body in memo.records.bodies():
        memo.schedule(key, delay=NODE_DEBOUNCE_S, trigger="crd")
