"""One record per DeepSeekServing: everything the operator remembers about that object.

The latest body (from kopf's events), the (uid, generation) last reconciled for a spec, the
reconcile lock, the pending reconcile, the read-your-writes caches (the status we last wrote,
apply responses the watch has not delivered yet, applies on their way), the FailedCreate Events
read for its StatefulSets and the back-off count live on one :class:`ServingRecord`; the parsed
specs of the objects reconciled last beside them (:class:`Records`, bounded). Forgetting a
deleted object drops both, and a test can count what is left. (What the *cluster* holds,
children, pods and Workloads, is mirrored by the owner index,
:mod:`deepseek_operator.actions.owned`, and leaves with the objects themselves.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from deepseek_operator.actions.children import pack_body, unpack_body
from deepseek_operator.actions.owned import ServingKey
from deepseek_operator.api.load import ServingObject, parse_serving
from deepseek_operator.controller.pod_refusals import Memo
from deepseek_operator.plan import ChildKey
from deepseek_operator.recent import RecentMemory

# uids of deleted DeepSeekServings remembered, so stale index entries never come back to life.
GONE_MEMORY = 10_000
# Parsed specs kept for the objects reconciled most recently: a burst's re-reconciles (child
# and pod events soon after a create) find theirs, while 1,000 idle objects do not each keep a
# parsed spec (about 12 KB of pydantic objects) that only their next generation would use.
PARSED_MEMORY = 256


@dataclass(frozen=True, slots=True)
class KeptBody:
    """A DeepSeekServing's latest body as its record keeps it: compressed JSON, with the few
    fields read between reconciles (its uid, its node selector) beside it.

    A body is read whole only once per reconcile, while 1,000 objects keep theirs all the
    time: as Python objects one costs about 21 KB, compressed about 2 KB.
    """

    uid: str
    node_selector: Mapping[str, str]
    packed: bytes

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> KeptBody:
        """Pack ``body`` (a JSON object, as the watch delivered it)."""
        meta = body.get("metadata") or {}
        selector = (body.get("spec") or {}).get("nodeSelector") or {}
        return cls(
            uid=str(meta.get("uid") or ""),
            node_selector=dict(selector) if isinstance(selector, Mapping) else {},
            packed=pack_body(body),
        )

    def unpacked(self) -> dict[str, Any]:
        """The body as it was delivered (a fresh copy each time)."""
        return unpack_body(self.packed)


@dataclass(slots=True)
class PendingReconcile:
    """A reconcile waiting for its time (:mod:`.queue`): the task, when it is due (loop time),
    why, and whether it may write children (False: every asker wanted the status only)."""

    task: asyncio.Task[None]
    due: float
    trigger: str
    full: bool


@dataclass(slots=True, eq=False)
class ServingRecord:
    """What the operator remembers about one DeepSeekServing."""

    # The latest body kopf delivered (None: only the reconciler knows the object so far).
    body: KeptBody | None = None
    # (uid, generation) last reconciled for a spec: an event with the same pair (a status echo,
    # a label edit) needs no reconcile.
    handled: tuple[str, int] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    pending: PendingReconcile | None = None  # the one reconcile waiting for its time
    # The last status we wrote with its resourceVersion, until the watch delivers it; packed
    # (compressed JSON) as in a burst of creates the watch lags for every object at once.
    written: tuple[int, bytes] | None = None
    # (kind, name) -> our last apply response, until the child watch delivers that version.
    applied: dict[ChildKey, Mapping[str, Any]] = field(default_factory=dict)
    # (kind, name) -> the newest resourceVersion the child watch delivered while our apply of
    # that child was on its way (0: none yet).
    in_flight: dict[ChildKey, int] = field(default_factory=dict)
    failures: int = 0  # consecutive blocked reconciles (the back-off's step)
    # Per LeaderWorkerSet or StatefulSet of it (uid): the FailedCreate Event read at its
    # version, so one Event LIST serves every reconcile until it changes (:mod:`.pod_refusals`).
    refusals: Memo = field(default_factory=dict)

    def freshest(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """``body`` with the status we last wrote, if the watch has not delivered it yet."""
        if self.written is None:
            return body
        rv, status = self.written
        if resource_version(body) >= rv:
            return body
        return {**body, "status": unpack_body(status)}

    def wrote_status(self, resource_version: int, status: Mapping[str, Any]) -> None:
        """Remember ``status``, written at ``resource_version``, until the watch delivers it."""
        self.written = (resource_version, pack_body(status))

    def merge_applied(
        self, live: Mapping[ChildKey, Mapping[str, Any]]
    ) -> dict[ChildKey, Mapping[str, Any]]:
        """The live children, newer apply responses winning over lagging index entries."""
        merged = dict(live)
        for child, obj in list(self.applied.items()):
            current = merged.get(child)
            if current is None or resource_version(current) < resource_version(obj):
                merged[child] = obj
            else:  # the watch caught up
                del self.applied[child]
        return merged

    def echo(self, child: ChildKey, body: Mapping[str, Any]) -> bool:
        """The child watch delivered ``body``: whether it is exactly the version of a child that
        our last apply wrote (its echo).

        That echo tells nothing new (the reconcile that wrote it already holds the response), so
        it needs no reconcile; any later change (a controller's status update, a hand edit) has
        a newer resourceVersion. Once the watch has delivered our version, the store holds it
        and the apply response is dropped (1,000 objects would otherwise keep 2,000 bodies).
        """
        rv = resource_version(body)
        if child in self.in_flight:
            # Our apply of it has not returned yet: this is its echo or a change that overtook
            # it; the apply's end decides (see :meth:`landed`).
            self.in_flight[child] = max(self.in_flight[child], rv)
            return True
        ours = self.applied.get(child)
        if ours is None or resource_version(ours) == 0:
            return False
        if rv >= resource_version(ours):
            del self.applied[child]
        return resource_version(ours) == rv

    def landed(self, child: ChildKey, response: Any) -> bool:
        """Our apply of ``child`` ended (``response`` None: it failed): whether a newer version
        the watch delivered meanwhile (someone else's write) asks for another reconcile."""
        seen = self.in_flight.pop(child, 0)
        written = resource_version(response) if isinstance(response, Mapping) else 0
        return seen > written

    def reconciler_state_dropped(self) -> ServingRecord:
        """A record that keeps only what kopf told (body, handled) and the pending reconcile
        of the name: a replaced object's caches must never leak into its successor's."""
        return ServingRecord(body=self.body, handled=self.handled, pending=self.pending)


def resource_version(obj: Mapping[str, Any]) -> int:
    """resourceVersion as an int (etcd revisions are integers; 0 when absent or opaque)."""
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


class Records:
    """Every :class:`ServingRecord`, by (namespace, name)."""

    def __init__(self) -> None:
        self._by_key: dict[ServingKey, ServingRecord] = {}
        # key -> (uid, generation, the parsed object), most recently used last (bounded): the
        # spec cannot change without a new generation.
        self._parsed: RecentMemory[ServingKey, tuple[str, int, ServingObject]] = RecentMemory(
            PARSED_MEMORY
        )
        # The uids of deleted objects, oldest first: the one thing kept after a delete (bounded),
        # so a late event of a deleted object never brings it back.
        self._gone: dict[str, None] = {}

    def bury(self, uid: str) -> bool:
        """Remember ``uid`` as deleted; whether it was news."""
        if not uid or uid in self._gone:
            return False
        self._gone[uid] = None
        while len(self._gone) > GONE_MEMORY:
            del self._gone[next(iter(self._gone))]
        return True

    def is_gone(self, uid: str) -> bool:
        """Whether the object ``uid`` was seen deleted."""
        return bool(uid) and uid in self._gone

    def tombstones(self) -> int:
        """How many deleted uids are remembered."""
        return len(self._gone)

    def live_uid(self, key: ServingKey) -> str | None:
        """The uid of ``key``'s latest body, unless none is kept or it was seen deleted."""
        rec = self._by_key.get(key)
        if rec is None or rec.body is None or self.is_gone(rec.body.uid):
            return None
        return rec.body.uid

    def get(self, key: ServingKey) -> ServingRecord | None:
        """The record of ``key`` (None: nothing remembered)."""
        return self._by_key.get(key)

    def ensure(self, key: ServingKey) -> ServingRecord:
        """The record of ``key``, made empty if there is none."""
        rec = self._by_key.get(key)
        if rec is None:
            rec = self._by_key[key] = ServingRecord()
        return rec

    def forget(self, key: ServingKey) -> None:
        """Drop all the operator remembers about ``key``."""
        self._by_key.pop(key, None)
        self._parsed.pop(key)

    def replace(self, key: ServingKey, rec: ServingRecord) -> None:
        """Put ``rec`` in place of ``key``'s record (and forget the old object's parsed spec)."""
        self._by_key[key] = rec
        self._parsed.pop(key)

    def parsed(self, key: ServingKey, uid: str, generation: int) -> ServingObject | None:
        """The parsed spec of ``key`` at (``uid``, ``generation``), if still remembered."""
        entry = self._parsed.get(key)
        if entry is None or entry[:2] != (uid, generation):
            return None
        return entry[2]

    def remember_parsed(
        self, key: ServingKey, uid: str, generation: int, obj: ServingObject
    ) -> None:
        """Remember ``obj`` as ``key``'s parsed spec (the least recently used one goes beyond
        :data:`PARSED_MEMORY`)."""
        self._parsed.put(key, (uid, generation, obj))

    def parse(self, body: Mapping[str, Any]) -> ServingObject:
        """``parse_serving(body)``, remembered for the object's uid and generation (parsing:
        schema, CEL rules, pydantic, is half a reconcile's CPU; the spec cannot change without
        a new generation)."""
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        uid, generation = str(meta.get("uid") or ""), int(meta.get("generation") or 0)
        known = self.parsed(key, uid, generation)
        if known is not None:
            return known
        obj = parse_serving(dict(body))
        self.remember_parsed(key, uid, generation, obj)
        return obj

    def parsed_count(self) -> int:
        """How many parsed specs are remembered."""
        return len(self._parsed)

    def serving_observed(self, key: ServingKey, body: Mapping[str, Any]) -> None:
        """The watch delivered ``body``: once it holds the status we last wrote, our copy of
        that status is not needed any more (1,000 objects would otherwise keep it twice)."""
        rec = self._by_key.get(key)
        if rec is not None and rec.written is not None and resource_version(body) >= rec.written[0]:
            rec.written = None

    def child_observed(
        self, namespace: str, owner: str, kind: str, name: str, body: Mapping[str, Any]
    ) -> bool:
        """Whether ``body``, from the child watch, is the echo of our own apply
        (:meth:`ServingRecord.echo`)."""
        rec = self._by_key.get((namespace, owner))
        return rec is not None and rec.echo((kind, name), body)

    def child_deleted(self, namespace: str, kind: str, name: str, owner: str) -> None:
        """A child of ``owner`` is gone: never mistake our old apply response for it."""
        rec = self._by_key.get((namespace, owner))
        if rec is not None:
            rec.applied.pop((kind, name), None)

    def bodies(self) -> Iterator[tuple[ServingKey, KeptBody]]:
        """(key, latest body) of every object kopf has told about (a snapshot)."""
        return iter([(k, r.body) for k, r in self._by_key.items() if r.body is not None])

    def items(self) -> list[tuple[ServingKey, ServingRecord]]:
        """Every (key, record) (a snapshot)."""
        return list(self._by_key.items())
