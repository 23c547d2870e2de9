"""kopf wiring: the handlers, registered on an explicit registry (:func:`registry`).

Nothing registers by being imported: ``deepseek-operator run`` passes :func:`registry`'s answer
to ``kopf.run``. DeepSeekServings come from one kopf event handler (no kopf create/update/resume
handlers, so kopf writes no bookkeeping annotation: one PATCH less per object); the add-on CRDs
from another. Handlers return nothing: kopf would otherwise write results into ``status``, which
the structural schema prunes. Everything else is :class:`~.state.OperatorState`'s.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from deepseek_operator.controller.discovery import ADDON_CRDS
from deepseek_operator.controller.state import OperatorState, keep_out_of_gc
from deepseek_operator.controller.watches import NODE_DEBOUNCE_S, WATCHES, Asks

# kopf peering: a peer whose heartbeat is older than this is dead, so a standby operator takes
# over within about this long after the active one is killed (kopf's default is 60 s).
PEERING_LIFETIME_S = 8
# How long kopf keeps an object's worker (a task with its queue and the last raw event: the whole
# body) after the object's last event. Our handler only queues a reconcile, so a worker is cheap
# to start again; kopf's default of 5 s kept hundreds of bodies alive in a burst of creates.
KOPF_WORKER_IDLE_S = 0.5
# kopf lists DeepSeekServings in pages of this many (its default is one response for all: at a
# restart with 1,000 of them, every body parsed at once beside the Node and child listings).
KOPF_LIST_CHUNK = 100


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


async def configure(settings: kopf.OperatorSettings, memo: OperatorState, **_: Any) -> None:
    """Peering, logging and watching settings; then start our own watches (API writes run on
    the :class:`WriteQueue` threads, not on the loop's default executor)."""
    # Two replicas without their peering object would both act: refuse to run instead.
    settings.peering.mandatory = not settings.peering.standalone
    settings.peering.lifetime = PEERING_LIFETIME_S
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.execution.max_workers = 16
    settings.queueing.idle_timeout = KOPF_WORKER_IDLE_S
    settings.watching.chunk_size = KOPF_LIST_CHUNK
    settings.persistence.diffbase_storage = NoDiffBase()
    keep_out_of_gc()  # everything imported and configured so far lives as long as the process
    memo.start_watches()


def login(memo: OperatorState, **_: Any) -> kopf.ConnectionInfo:
    """kopf's credentials: the same as our own client's (:mod:`deepseek_operator.kube.credentials`), read again each
    time kopf asks (after a 401, for a rotated token)."""
    info: kopf.ConnectionInfo = memo.kube.credentials().connection_info()
    return info


async def stop_watching(memo: OperatorState, **_: Any) -> None:
    """Close the Node and child watches."""
    memo.stop_watches()


async def serving_event(type: str | None, body: kopf.Body, memo: OperatorState, **_: Any) -> None:
    """Every event of a DeepSeekServing: keep its latest body and, for a new object, a new
    generation or one first seen at start-up (a resume), queue a reconcile due now."""
    trigger = memo.serving_seen(type, body)
    if trigger is None:
        return
    meta = body.get("metadata") or {}
    key = (str(meta.get("namespace")), str(meta.get("name")))
    # Queued, not awaited: kopf's worker for the object (and the event body it holds) ends
    # now, not after the reconcile; in a burst of creates, or a restart's 1,000 resumes waiting
    # their turn, that would be one whole body per object.
    memo.schedule(key, delay=0.0, trigger=trigger)


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


# The handler of each kopf-watched row of the watch table, by what its events ask for.
KOPF_HANDLERS: dict[Asks, Any] = {Asks.SELF: serving_event, Asks.ALL: addon_crd_changed}


def registry() -> kopf.OperatorRegistry:
    """A registry holding every handler of the operator (and kopf's login with our own
    credentials: in-cluster or kubeconfig)."""
    reg = kopf.OperatorRegistry()
    kopf.on.login(registry=reg)(login)
    kopf.on.startup(registry=reg)(configure)
    kopf.on.cleanup(registry=reg)(stop_watching)
    for watch in WATCHES:
        if watch.via == "kopf":
            group, _, version = watch.api_version.rpartition("/")
            kopf.on.event(group, version, watch.plural, registry=reg)(KOPF_HANDLERS[watch.asks])
    return reg
