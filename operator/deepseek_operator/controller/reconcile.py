"""One reconcile of a DeepSeekServing: plan, apply children, write status, report.

The plan comes from the same pure :func:`~deepseek_operator.plan.plan` as the offline ``render``
command; this module keeps only the I/O: per-object locks, read-your-writes caches, writes and
events. Node facts and live children come from in-memory indexes (no LIST per reconcile).
Children are written only when the live object no longer contains the desired one (so a hand
edit or deletion is restored, and a no-op reconcile writes nothing but, at most, the status).
A status-only reconcile (asked for by pod events) writes no child: pods never restart pods.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from deepseek_operator.actions import (
    Action,
    Apply,
    CheckOwner,
    Decided,
    Delete,
    PatchStatus,
    PostEvent,
    after_write_actions,
    backoff_delay,
    invalid_spec_actions,
    next_failures,
    plan_write_actions,
    split_children,
)
from deepseek_operator.actions.children import (
    involved_object,
    pack_body,
    reduced_child,
    unpack_body,
)
from deepseek_operator.actions.roles import plan_decision_actions
from deepseek_operator.controller import metrics
from deepseek_operator.controller.encoding import EncodedApply, encoded_apply, encoded_writes
from deepseek_operator.controller.pod_refusals import RECHECK_S, StatefulSetRefusals
from deepseek_operator.controller.records import Records, ServingRecord
from deepseek_operator.controller.records import resource_version as _rv
from deepseek_operator.controller.weights import behind_weights
from deepseek_operator.controller.weights import utc_now as _now
from deepseek_operator.engine.cluster_apis import ClusterApis
from deepseek_operator.errors import SpecError
from deepseek_operator.kube.client import ForeignObject, KubeClient, OwnerGone, refusal
from deepseek_operator.kube.encoding import EncodedObject
from deepseek_operator.names import LWS_KIND, role_object_name
from deepseek_operator.nodes.facts import NodeInventory
from deepseek_operator.plan import ChildKey, GroupPods, Observed, RoleWorkloads, plan

log = logging.getLogger("deepseek_operator.controller")
_T = TypeVar("_T")


@dataclass
class Outcome:
    """What one reconcile did (for logs, metrics and tests)."""

    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    status_patched: bool = False
    # The chosen MoE backend (not the whole Resolution: in a burst every reconcile waiting for
    # its child writes would keep one alive after the decision memo dropped it).
    backend: str | None = None
    refused: list[str] = field(default_factory=list)  # "Kind/name: <the API server's words>"
    # children not written: an object of that name exists and is not ours (ForeignObject words)
    foreign: list[str] = field(default_factory=list)
    retry_after: float | None = None  # seconds; set while a child is refused or in the way
    # seconds; set while a LeaderWorkerSet (or one of its StatefulSets) misses pods and no Event
    # says why yet (or just after its write), or while spec.modelCache.fill's fill is not done
    recheck_after: float | None = None
    # a child we wrote changed again while our write was on its way (a controller's update
    # overtook the response): its owner needs another look once the watch settles
    children_changed_meanwhile: bool = False


def _uid(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("uid") or "")


class Reconciler:
    """Reconciles DeepSeekServings one at a time each (a lock per object)."""

    def __init__(
        self,
        kube: KubeClient,
        post_event: Any = None,
        apis_of: Callable[[], ClusterApis] | None = None,
        apis_fresh: Callable[[], ClusterApis | None] | None = None,
        records: Records | None = None,
    ) -> None:
        self.kube = kube
        self.post_event = post_event  # callable(body, type, reason, message) or None
        self.apis_of = apis_of or ClusterApis  # what the cluster serves (blocking: discovery)
        # The same answer without blocking, or None when discovery must be asked (a thread hop
        # costs milliseconds before the status write under load; discovery is asked rarely).
        self.apis_fresh = apis_fresh
        # Per object: its lock, read-your-writes caches, parsed spec and back-off count (one
        # record each, shared with the operator's state when it passes its own).
        self.records = records if records is not None else Records()
        self.statefulset_refusals = StatefulSetRefusals(kube)

    async def reconcile(
        self,
        key: tuple[str, str],
        body_of: Callable[[], Mapping[str, Any] | None],
        nodes_of: Callable[[], NodeInventory],
        live_of: Callable[[], Mapping[ChildKey, Mapping[str, Any]]],
        trigger: str,
        statefulsets_of: Callable[[], Iterable[Mapping[str, Any]]] | None = None,
        groups_of: Callable[[], Mapping[str, Mapping[int, GroupPods]]] | None = None,
        status_only: bool = False,
        workloads_of: Callable[[], RoleWorkloads] | None = None,
    ) -> Outcome | None:
        """Reconcile ``key``, reading its latest body, nodes and children once the lock is held.

        ``statefulsets_of``: the StatefulSets LeaderWorkerSet made for ``key`` (their pod
        refusals are reported; they are never the operator's to write).

        Reading under the lock matters: a reconcile queued behind another must see what the
        first one wrote (its status, its children), not the snapshot that queued it.
        ``groups_of``: each LeaderWorkerSet group's pods by role; ``status_only``: write no child;
        ``workloads_of``: Kueue's Workloads of ``key`` by role (``spec.queueName``: Admitted).
        """
        namespace, name = key
        started = time.perf_counter()
        rec = self.records.ensure(key)
        async with rec.lock:
            body = body_of()
            if body is None or self.is_gone(body):  # deleted meanwhile
                self.forget(key)
                return None
            body = rec.freshest(body)
            uid = _uid(body)
            live = rec.merge_applied(live_of())
            try:
                try:
                    statefulsets = list(statefulsets_of()) if statefulsets_of else []
                    groups = groups_of() if groups_of is not None else {}
                    workloads = workloads_of() if workloads_of is not None else {}
                    call = self._reconcile(
                        rec, body, nodes_of(), live, statefulsets, groups, status_only, workloads
                    )
                    del body  # the call holds it only as long as it needs it
                    outcome = await call
                except SpecError as exc:
                    metrics.RECONCILES.labels(trigger, "invalid").inc()
                    body = rec.freshest(body_of() or {})  # under the same lock: what was parsed
                    observed = Observed.from_body(body, live)
                    actions = invalid_spec_actions(
                        observed, exc.one_line(), _now(), body.get("status") or {}
                    )
                    await self._execute(rec, key, uid, body, actions, Outcome())
                    return Outcome(status_patched=True)
            except OwnerGone:
                # Deleted (or replaced) while we worked: the work ends here, quietly.
                metrics.RECONCILES.labels(trigger, "gone").inc()
                self.gone(key, uid)
                return None
            except Exception as exc:
                metrics.RECONCILES.labels(trigger, "error").inc()
                metrics.ERRORS.labels(type(exc).__name__).inc()
                raise
            finally:
                metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)
        blocked = bool(outcome.refused or outcome.foreign)
        rec.failures = next_failures(rec.failures, blocked=blocked, trigger=trigger)
        outcome.retry_after = backoff_delay(rec.failures)
        metrics.RECONCILES.labels(trigger, "refused" if blocked else "ok").inc()
        log.info(
            "Reconciled DeepSeekServing",
            extra={
                "namespace": namespace,
                "name_": name,
                "trigger": trigger,
                "backend": outcome.backend,
                "applied": outcome.applied,
                "deleted": outcome.deleted,
                "status_patched": outcome.status_patched,
                "refused": outcome.refused,
                "foreign": outcome.foreign,
                "retry_after": outcome.retry_after,
            },
        )
        return outcome

    def is_gone(self, body: Mapping[str, Any]) -> bool:
        """Whether ``body`` is a DeepSeekServing we saw deleted (a stale index entry)."""
        return self.records.is_gone(_uid(body))

    def gone(self, key: tuple[str, str], uid: str) -> None:
        """``key`` (with ``uid``) was deleted: never work for it again, forget all about it."""
        if self.records.bury(uid):
            log.info(
                "DeepSeekServing is gone; its work ends",
                extra={"namespace": key[0], "name_": key[1], "uid": uid},
            )
        self.forget(key, uid)

    def forget(self, key: tuple[str, str], uid: str = "") -> None:
        """Drop what we remember about a deleted DeepSeekServing (given ``uid``: unless the
        record now holds a newer object of that name, whose body and handled pair stay)."""
        rec = self.records.get(key)
        body_uid = rec.body.uid if rec is not None and rec.body is not None else ""
        if rec is None or not uid or not body_uid or body_uid == uid:
            self.records.forget(key)
        else:
            self.records.replace(key, rec.reconciler_state_dropped())

    async def _write_status(
        self, rec: ServingRecord, key: tuple[str, str], uid: str, status: dict[str, Any]
    ) -> None:
        response = await self.kube.patch_status(key[0], key[1], uid, status)
        # What the object holds now: the fields the patch named null are gone.
        rec.wrote_status(_rv(response or {}), {k: v for k, v in status.items() if v is not None})

    async def _reconcile(
        self,
        rec: ServingRecord,
        body: Mapping[str, Any],
        inventory: NodeInventory,
        live: Mapping[ChildKey, Mapping[str, Any]],
        statefulsets: Sequence[Mapping[str, Any]] = (),
        groups: Mapping[str, Mapping[int, GroupPods]] | None = None,
        status_only: bool = False,
        workloads: RoleWorkloads | None = None,
    ) -> Outcome:
        obj = self.records.parse(body)
        ours, strangers = split_children(live, obj.uid)
        pod_refusals: tuple[str, ...] = ()
        recheck: float | None = None
        # A disaggregated serving has one LeaderWorkerSet per role, named <name>-<role>.
        roles = obj.spec.disaggregation.roles if obj.spec.disaggregation else ()
        present = {_uid(s) for s in statefulsets}
        for name in [obj.name, *(role_object_name(obj.name, r.role) for r in roles)]:
            leaderworkerset = ours.get((LWS_KIND, name))
            if leaderworkerset is None:
                continue
            # Ours: it and its StatefulSets report their refusals.
            present.add(_uid(leaderworkerset))
            found, again = await self.statefulset_refusals.read(
                obj.namespace, statefulsets, leaderworkerset, rec.refusals
            )
            pod_refusals += found
            if again is not None:
                recheck = again if recheck is None else min(recheck, again)
        rec.refusals = {u: m for u, m in rec.refusals.items() if u in present}  # what exists
        observed = Observed.from_body(body, ours, pod_refusals, groups, workloads)
        apis = self.apis_fresh() if self.apis_fresh is not None else None
        if apis is None:
            apis = await asyncio.to_thread(self.apis_of)
        planned = plan(obj, inventory, observed, _now(), apis)
        planned, recheck = await behind_weights(self.kube, obj, observed, planned, apis, recheck)
        outcome = Outcome(backend=planned.resolution.moe_backend, recheck_after=recheck)
        status = planned.status_dict
        writes = plan_write_actions(
            planned,
            ours,
            strangers,
            observed.raw_status,
            owner_name=obj.name,
            status_only=status_only,
        )
        outcome.foreign.extend(writes.foreign)
        if writes.lws_written:
            # Its controller may fail to create a StatefulSet for what we just wrote and say so
            # only in an Event, changing nothing we watch: look again.
            outcome.recheck_after = min(recheck or RECHECK_S, RECHECK_S)
        # Only the encoded children wait for a writer thread, not the rendered objects; a pair
        # writes all its children or none (its unseen names are asked first).
        actions = await encoded_writes(self.kube, writes, obj.uid, outcome.foreign)
        decided = plan_decision_actions(observed, planned)
        written_status_only = writes.status_only
        body = involved_object(body)
        key, uid, generation = (obj.namespace, obj.name), obj.uid, obj.generation
        # In a burst the child writes wait behind every other object's: until they are done
        # this keeps only what round 2 reads, not the plan, the body, the parsed spec or the
        # decision, and the status it wrote packed (the status write itself goes first).
        packed_status = pack_body(status)
        del planned, writes, observed, obj, status
        await self._execute(rec, key, uid, body, _drained(actions), outcome)
        then = after_write_actions(
            unpack_body(packed_status),
            outcome.refused,
            outcome.foreign,
            generation=generation,
            now=_now(),
            status_only=written_status_only,
        )
        await self._execute(rec, key, uid, body, then + decided, outcome)
        return outcome

    async def _execute(
        self,
        rec: ServingRecord,
        key: tuple[str, str],
        uid: str,
        body: Mapping[str, Any],
        actions: Iterable[Action | EncodedApply],
        outcome: Outcome,
    ) -> None:
        """Run ``actions`` in order (taken one by one: given :func:`_drained`, an action done
        is not held while later ones wait); a run of child writes goes out at once
        (concurrently).

        Writes are started only once the owner is known to live (a status patch's uid
        precondition or :class:`CheckOwner` comes first), so no coroutine is left un-awaited
        when it is not."""
        batch: list[Awaitable[None]] = []
        for action in itertools.chain(actions, [None]):
            if isinstance(action, Apply | EncodedApply | Delete):
                batch.append(self._write(rec, key[0], uid, action, outcome))
                continue
            if batch:
                await asyncio.gather(*batch)
                batch = []
            if isinstance(action, PatchStatus):
                await self._write_status(rec, key, uid, dict(action.status))
                outcome.status_patched = True
            elif isinstance(action, CheckOwner):
                await self.kube.check_owner(key[0], key[1], uid)
            elif isinstance(action, PostEvent):
                self._event(body, action.type, action.reason, action.message)
            elif isinstance(action, Decided):
                metrics.DECISIONS.labels(action.moe_backend, action.reason).inc()

    def _write(
        self,
        rec: ServingRecord,
        namespace: str,
        uid: str,
        action: Apply | EncodedApply | Delete,
        outcome: Outcome,
    ) -> Awaitable[None]:
        """The coroutine of one child write (recorded in ``outcome`` as it is planned)."""
        if isinstance(action, Apply | EncodedApply):
            write = action if isinstance(action, EncodedApply) else encoded_apply(action)
            outcome.applied.append(f"{write.manifest.kind}/{write.manifest.name}")
            return self._apply(rec, uid, write.manifest, outcome, write.unseen)
        rec.applied.pop((action.kind, action.name), None)
        outcome.deleted.append(f"{action.kind}/{action.name}")
        return self.kube.delete(action.api_version, action.kind, namespace, action.name)

    async def _apply(
        self,
        rec: ServingRecord,
        uid: str,
        manifest: EncodedObject,
        outcome: Outcome,
        unseen: bool,
    ) -> None:
        """Write one child; ``unseen``: the watches show no object of its name, so the API
        server is asked first whether one of someone else's is there."""
        child = (manifest.kind, manifest.name)
        rec.in_flight[child] = 0
        response: Any = None
        try:
            if unseen:
                response = await self.kube.apply(manifest, only_if_ours=uid)
            else:
                response = await self.kube.apply(manifest)
        except ForeignObject as exc:
            outcome.children_changed_meanwhile |= rec.landed(child, None)
            outcome.foreign.append(exc.message)
            return
        except Exception as exc:
            outcome.children_changed_meanwhile |= rec.landed(child, None)
            refused = refusal(exc)
            if refused is None:  # an outage or a "try again" answer: run_reconcile retries
                raise
            outcome.refused.append(f"{manifest.kind}/{manifest.name}: {refused.message}")
            return
        seen = rec.in_flight.get(child, 0)
        outcome.children_changed_meanwhile |= rec.landed(child, response)
        metrics.APPLIES.labels(manifest.kind).inc()
        if isinstance(response, dict) and _rv(response) > seen:
            # Until the watch delivers this version (if it already has, the store holds it or
            # a newer one): kept as the child stores keep it.
            rec.applied[child] = reduced_child(response)

    def _event(self, body: Mapping[str, Any], etype: str, reason: str, message: str) -> None:
        if self.post_event is not None:
            try:
                self.post_event(body, etype, reason, message[:1000])
            except Exception as exc:  # best effort; the status carries the same facts
                log.warning("Posting an event failed: %s: %s", type(exc).__name__, exc)


def _drained(items: list[_T]) -> Iterator[_T]:
    """``items`` from the first, each removed from the list as it is taken."""
    items.reverse()
    while items:
        yield items.pop()
