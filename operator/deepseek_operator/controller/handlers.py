"""kopf handlers: thin glue between watch events and :class:`Reconciler`.

* Node facts come from :class:`NodeWatch` (one LIST at start, then a WATCH; not a kopf index,
  whose initial listing costs O(nodes²)); every reconcile waits until the first listing is in.
* kopf indexes (filled before any handler runs): DeepSeekServings → their latest body, our
  children → their live body. A reconcile therefore makes no LIST call.
* One reconcile for create, update and resume of a DeepSeekServing.
* A Node change that alters GPU facts, labels, taints, readiness or allocatable GPUs re-evaluates
  only the DeepSeekServings whose ``nodeSelector`` matches the node (before or after), debounced
  so a burst of node changes costs one reconcile per object.
* A child event (readiness, hand edit, deletion) reconciles its owner; the echo of our own
  apply (the very version it returned) does not. So does an event of a StatefulSet our
  LeaderWorkerSet made (its refused pods surface as ``PodsRefused``).
* Our LeaderWorkerSet pods come from :class:`PodWatch` (label-selected, per watched namespace or
  cluster-wide; only name, node and readiness kept): a change asks for a *status-only*
  reconcile of their owner (``status.groups``), which never writes a child.
The process's state (:class:`OperatorState`) is kopf's ``memo``, passed to every handler.
Handlers return nothing: kopf would otherwise write results into ``status``, which the
structural schema prunes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from deepseek_operator.controller import metrics
from deepseek_operator.controller.kube import WRITER_THREADS, KubeClient
from deepseek_operator.controller.node_tracker import NodeChange, NodeTracker
from deepseek_operator.controller.node_watch import NodeWatch
from deepseek_operator.controller.pod_watch import PodGroups, PodKey, PodRecord, PodWatch
from deepseek_operator.controller.reconcile import Outcome, Reconciler
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
CHILD_DEBOUNCE_S = 0.2
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
CHILD_LABELS = {LABEL_MANAGED_BY: MANAGED_BY}
# StatefulSets LeaderWorkerSet makes (leader and per-group workers) carry its name, not our labels.
LWS_STATEFULSET_LABELS = {LWS_NAME_LABEL: kopf.PRESENT}

ServingKey = tuple[str, str]  # (namespace, name)
ChildEntry = tuple[str, str, dict[str, Any]]  # (kind, name, body)


def _post_event(body: Mapping[str, Any], etype: str, reason: str, message: str) -> None:
    kopf.event(dict(body), type=etype, reason=reason, message=message)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Indexes:
    """kopf's in-memory indexes, as the handlers receive them."""

    servings: kopf.Index[ServingKey, dict[str, Any]]
    children: tuple[kopf.Index[ServingKey, ChildEntry], ...]
    statefulsets: kopf.Index[ServingKey, dict[str, Any]] | None = None

    @classmethod
    def of(cls, kwargs: Mapping[str, Any]) -> Indexes:
        """The indexes among a handler's keyword arguments."""
        return cls(
            servings=kwargs["serving_index"],
            children=(
                kwargs["deployment_index"],
                kwargs["leaderworkerset_index"],
                kwargs["computedomain_index"],
                kwargs["service_index"],
            ),
            statefulsets=kwargs.get("lws_statefulset_index"),
        )

    def body(self, key: ServingKey) -> Mapping[str, Any] | None:
        """The latest body of a DeepSeekServing (None once deleted)."""
        bodies = list(self.servings.get(key, []))
        return bodies[0] if bodies else None

    def lws_statefulsets(self, key: ServingKey) -> list[dict[str, Any]]:
        """The StatefulSets of the LeaderWorkerSet named like ``key`` (read, never written)."""
        return list(self.statefulsets.get(key, [])) if self.statefulsets is not None else []

    def live_children(self, key: ServingKey) -> dict[ChildKey, dict[str, Any]]:
        """The DeepSeekServing's children as the watches last saw them."""
        live: dict[ChildKey, dict[str, Any]] = {}
        for index in self.children:
            for kind, child, body in index.get(key, []):
                live[(kind, child)] = body
        return live


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


class OperatorState:
    """The operator process's state: API client, reconciler, node tracker and pending reconciles.

    It is kopf's ``memo``: kopf shallow-copies the memo for every object it handles, so
    :meth:`__copy__` returns the one instance every handler must share.
    """

    def __init__(
        self, compute_domain_enabled: bool = True, namespaces: tuple[str, ...] = ()
    ) -> None:
        self.namespaces = namespaces  # watched namespaces; empty: the whole cluster
        self.kube = KubeClient()
        self.apis = ClusterApiProbe(self.kube, compute_domain_enabled)
        self.reconciler = Reconciler(
            self.kube, post_event=_post_event, apis_of=self.apis.current, apis_fresh=self.apis.fresh
        )
        self.nodes = NodeTracker()
        self.nodes_listed = asyncio.Event()  # set once the first Node listing is in
        self.node_watch: NodeWatch | None = None
        self.pods = PodGroups()
        self.pod_watches: list[PodWatch] = []
        self.indexes: Indexes | None = None  # known once the first handler has run
        self.pending: dict[ServingKey, asyncio.Task[None]] = {}
        self.full_wanted: set[ServingKey] = set()  # a pending reconcile may write children

    def __copy__(self) -> OperatorState:
        return self

    def remember(self, kwargs: Mapping[str, Any]) -> Indexes:
        """Keep the indexes of a handler call for debounced reconciles that run later."""
        self.indexes = Indexes.of(kwargs)
        return self.indexes

    def watch_nodes(self) -> None:
        """Start listing and watching Nodes (from the running event loop)."""
        self.node_watch = NodeWatch(
            self.kube, asyncio.get_running_loop(), self.nodes_seen, self.node_seen
        )
        self.node_watch.start()

    def watch_pods(self) -> None:
        """Start listing and watching our LeaderWorkerSet pods (from the running event loop)."""
        loop = asyncio.get_running_loop()
        for namespace in self.namespaces or (None,):
            watch = PodWatch(self.kube, loop, namespace, self.pods_listed, self.pod_seen)
            self.pod_watches.append(watch)
            watch.start()

    def pods_listed(self, namespace: str | None, snapshot: dict[PodKey, PodRecord]) -> None:
        """A full listing of our LWS pods in ``namespace`` (None: every namespace)."""
        self.pods_changed(self.pods.replace(namespace, snapshot))

    def pod_seen(self, key: PodKey, record: PodRecord | None) -> None:
        """One pod event (``record`` None: deleted)."""
        self.pods_changed(self.pods.observe(key, record))

    def pods_changed(self, owners: set[ServingKey]) -> None:
        """Refresh the status of the DeepSeekServings whose group pods changed (status only)."""
        if self.indexes is None:  # no DeepSeekServing seen yet: its first reconcile reads them
            return
        for owner in owners:
            if self.indexes.body(owner) is not None:
                self.schedule(owner, delay=POD_DEBOUNCE_S, trigger="pods", status_only=True)

    def nodes_seen(self, listed: dict[str, NodeFacts]) -> None:
        """A full Node listing (at start, or after the watch expired)."""
        changes = self.nodes.replace_all(listed)
        metrics.NODES.set(len(self.nodes))
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
        if not changes or self.indexes is None:  # no DeepSeekServing seen yet
            return
        servings = self.indexes.servings
        for key in list(servings):
            for serving in servings.get(key, []):
                if self.reconciler.is_gone(serving):
                    continue
                selector = (serving.get("spec") or {}).get("nodeSelector") or {}
                if any(change.may_affect(selector) for change in changes):
                    self.schedule(key, delay=NODE_DEBOUNCE_S, trigger="nodes")

    async def reconcile(
        self, key: ServingKey, trigger: str, status_only: bool = False
    ) -> Outcome | None:
        """Reconcile ``key`` with whatever the indexes hold once its turn comes."""
        indexes = self.indexes
        assert indexes is not None
        await self.nodes_listed.wait()  # never decide on a partial inventory
        return await self.reconciler.reconcile(
            key,
            lambda: indexes.body(key),
            self.nodes.inventory,
            lambda: indexes.live_children(key),
            trigger,
            statefulsets_of=lambda: indexes.lws_statefulsets(key),
            groups_of=lambda: self.pods.groups(key),
            status_only=status_only,
        )

    def schedule(
        self, key: ServingKey, delay: float, trigger: str, status_only: bool = False
    ) -> None:
        """Reconcile soon; events arriving meanwhile fold into the same reconcile, which writes
        children unless every event that asked for it wanted the status only (pod events)."""
        if not status_only:
            self.full_wanted.add(key)
        if key in self.pending and not self.pending[key].done():
            return

        async def later() -> None:
            await asyncio.sleep(delay)
            self.pending.pop(key, None)
            only_status = key not in self.full_wanted
            self.full_wanted.discard(key)
            try:
                outcome = await self.reconcile(key, trigger=trigger, status_only=only_status)
            except Exception as exc:
                # One line, no traceback: the next event or the backoff retries.
                log.error(
                    "Reconcile failed: %s: %s",
                    type(exc).__name__,
                    exc,
                    extra={"namespace": key[0], "name_": key[1], "trigger": trigger},
                )
                self.schedule(key, BACKOFF_AFTER_ERROR_S, trigger="retry", status_only=only_status)
                return
            if outcome is not None and outcome.retry_after is not None:
                self.schedule(key, outcome.retry_after, trigger="backoff")
            elif outcome is not None and outcome.recheck_after is not None:
                self.schedule(key, outcome.recheck_after, trigger="recheck")

        self.pending[key] = asyncio.create_task(later())

    def forget(self, key: ServingKey, uid: str) -> None:
        """``key`` was deleted: cancel its pending reconcile and drop what we know about it."""
        task = self.pending.pop(key, None)
        if task is not None and not task.done():
            task.cancel()
        self.full_wanted.discard(key)
        self.reconciler.gone(key, uid)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: OperatorState, **_: Any) -> None:
    """Keep kopf's bookkeeping in annotations (the structural schema prunes unknown status)."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=KOPF_ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=KOPF_ANNOTATION_PREFIX,
        key="last-handled-configuration",
        ignored_fields=["status"],
    )
    # Two replicas without their peering object would both act: refuse to run instead.
    settings.peering.mandatory = not settings.peering.standalone
    settings.peering.lifetime = PEERING_LIFETIME_S
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.execution.max_workers = 16
    # The Kubernetes client blocks; the default pool (cores + 4 threads) serialises bursts.
    asyncio.get_running_loop().set_default_executor(
        concurrent.futures.ThreadPoolExecutor(max_workers=WRITER_THREADS, thread_name_prefix="kube")
    )
    memo.watch_nodes()
    memo.watch_pods()


@kopf.on.cleanup()
async def stop_watching_nodes(memo: OperatorState, **_: Any) -> None:
    """Close the Node and pod watches."""
    if memo.node_watch is not None:
        memo.node_watch.stop()
    for watch in memo.pod_watches:
        watch.stop()


# --- indexes ------------------------------------------------------------------------------------


@kopf.index(GROUP, VERSION, PLURAL)
def serving_index(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[ServingKey, dict[str, Any]]:
    """(namespace, name) → the latest DeepSeekServing body."""
    return {(str(namespace), name): _kept(body)}


def _kept(body: kopf.Body) -> dict[str, Any]:
    """``body`` as an index keeps it: without ``metadata.managedFields``, which nothing here reads
    and which, for server-side-applied objects, is about as large as the object itself
    (1,000 DeepSeekServings: their Deployments, Services and bodies held twice over)."""
    kept = dict(body)
    meta = kept.get("metadata")
    if isinstance(meta, Mapping) and "managedFields" in meta:
        kept["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return kept


def _child_entry(namespace: str | None, name: str, body: kopf.Body) -> dict[ServingKey, ChildEntry]:
    owner = (body.get("metadata", {}).get("labels") or {}).get(LABEL_INSTANCE)
    if not owner:
        return {}
    return {(str(namespace), owner): (str(body.get("kind")), name, _kept(body))}


@kopf.index("apps", "v1", "deployments", labels=CHILD_LABELS)
def deployment_index(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[ServingKey, ChildEntry]:
    """(namespace, owner) → our Deployments."""
    return _child_entry(namespace, name, body)


@kopf.index(LWS_GROUP, LWS_VERSION, "leaderworkersets", labels=CHILD_LABELS)
def leaderworkerset_index(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[ServingKey, ChildEntry]:
    """(namespace, owner) → our LeaderWorkerSets (kopf waits for the CRD if it is absent)."""
    return _child_entry(namespace, name, body)


@kopf.index(CD_GROUP, CD_VERSION, "computedomains", labels=CHILD_LABELS)
def computedomain_index(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[ServingKey, ChildEntry]:
    """(namespace, owner) → our ComputeDomains (kopf waits for the CRD if it is absent)."""
    return _child_entry(namespace, name, body)


@kopf.index("", "v1", "services", labels=CHILD_LABELS)
def service_index(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[ServingKey, ChildEntry]:
    """(namespace, owner) → our Services."""
    return _child_entry(namespace, name, body)


@kopf.index("apps", "v1", "statefulsets", labels=LWS_STATEFULSET_LABELS)
def lws_statefulset_index(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[ServingKey, dict[str, Any]]:
    """(namespace, LeaderWorkerSet name) → its StatefulSets, reduced to what pod refusals need.

    Our LeaderWorkerSet is named after its DeepSeekServing; the reconciler reads these only when
    that LeaderWorkerSet is ours.
    """
    meta = body.get("metadata") or {}
    owner = (meta.get("labels") or {}).get(LWS_NAME_LABEL)
    if not owner:
        return {}
    kept_meta = {k: meta.get(k) for k in ("name", "uid", "generation", "resourceVersion")}
    replicas = (body.get("spec") or {}).get("replicas")
    return {
        (str(namespace), str(owner)): {
            "metadata": kept_meta,
            "spec": {"replicas": replicas},
            "status": dict(body.get("status") or {}),
        }
    }


# --- DeepSeekServing ----------------------------------------------------------------------------


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
async def reconcile_serving(
    body: kopf.Body, reason: str, memo: OperatorState, **kwargs: Any
) -> None:
    """Create, update and resume: decide, apply children, write status."""
    memo.remember(kwargs)
    meta = body.get("metadata") or {}
    try:
        outcome = await memo.reconcile(
            (str(meta.get("namespace")), str(meta.get("name"))), str(reason)
        )
    except Exception as exc:
        raise kopf.TemporaryError(
            f"Reconcile failed: {type(exc).__name__}: {exc}", delay=BACKOFF_AFTER_ERROR_S
        ) from None
    if outcome is not None and outcome.recheck_after is not None and outcome.retry_after is None:
        memo.schedule(
            (str(meta.get("namespace")), str(meta.get("name"))),
            outcome.recheck_after,
            trigger="recheck",
        )
    if outcome is not None and outcome.retry_after is not None:
        # The API server refused a child: retry with capped exponential backoff.
        raise kopf.TemporaryError(
            "the API server refused " + "; ".join(outcome.refused), delay=outcome.retry_after
        )


@kopf.on.event(GROUP, VERSION, PLURAL)
async def serving_event(type: str, body: kopf.Body, memo: OperatorState, **_: Any) -> None:
    """A deleted DeepSeekServing: end its work now and forget it (no zombie reconciles)."""
    if type == "DELETED":
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        memo.forget(key, str(meta.get("uid") or ""))


# --- add-on CRDs (LeaderWorkerSet, ComputeDomain) ------------------------------------------------


@kopf.on.event("apiextensions.k8s.io", "v1", "customresourcedefinitions")
async def addon_crd_changed(
    name: str, type: str, body: kopf.Body, memo: OperatorState, **kwargs: Any
) -> None:
    """LeaderWorkerSet or ComputeDomain installed, established or removed: decide again."""
    if name not in ADDON_CRDS:
        return
    memo.apis.crd_seen(name, None if type == "DELETED" else body)
    if type is None:  # the initial listing: resume reconciles every DeepSeekServing anyway
        return
    indexes = memo.remember(kwargs)
    for key in list(indexes.servings):
        memo.schedule(key, delay=NODE_DEBOUNCE_S, trigger="crd")


# --- children -----------------------------------------------------------------------------------


@kopf.on.event("apps", "v1", "statefulsets", labels=LWS_STATEFULSET_LABELS)
async def lws_statefulset_changed(
    namespace: str | None, type: str, body: kopf.Body, memo: OperatorState, **kwargs: Any
) -> None:
    """A StatefulSet of a LeaderWorkerSet changed: reconcile the DeepSeekServing it serves, if
    any, so pods its controller cannot create surface as ``PodsRefused``."""
    if type is None:  # the initial listing is covered by resume
        return
    indexes = memo.remember(kwargs)
    owner = ((body.get("metadata") or {}).get("labels") or {}).get(LWS_NAME_LABEL)
    key = (str(namespace), str(owner))
    body_of_owner = indexes.body(key)
    if body_of_owner is not None and not memo.reconciler.is_gone(body_of_owner):
        memo.schedule(key, delay=CHILD_DEBOUNCE_S, trigger="child")


@kopf.on.event("apps", "v1", "deployments", labels=CHILD_LABELS)
@kopf.on.event(LWS_GROUP, LWS_VERSION, "leaderworkersets", labels=CHILD_LABELS)
@kopf.on.event(CD_GROUP, CD_VERSION, "computedomains", labels=CHILD_LABELS)
@kopf.on.event("", "v1", "services", labels=CHILD_LABELS)
async def child_changed(
    namespace: str | None, type: str, body: kopf.Body, memo: OperatorState, **kwargs: Any
) -> None:
    """Readiness changes, hand edits and deletions of our children: reconcile their owner."""
    if type is None:  # the initial listing is covered by resume
        return
    indexes = memo.remember(kwargs)
    meta = body.get("metadata") or {}
    if type == "DELETED":
        memo.reconciler.child_deleted(str(namespace), str(body.get("kind")), str(meta.get("name")))
    owner = (meta.get("labels") or {}).get(LABEL_INSTANCE)
    if not owner:
        return
    key = (str(namespace), owner)
    if type != "DELETED" and memo.reconciler.is_own_write(
        key[0], owner, str(body.get("kind")), str(meta.get("name")), body
    ):
        return  # the watch echoing our own apply
    body_of_owner = indexes.body(key)
    # Garbage collection deleting the children of a deleted owner is no reason to reconcile it.
    if body_of_owner is not None and not memo.reconciler.is_gone(body_of_owner):
        memo.schedule(key, delay=CHILD_DEBOUNCE_S, trigger="child")
