"""kopf handlers: thin glue between watch events and :class:`Reconciler`.

* Indexes (filled before any handler runs): Nodes → :class:`NodeFacts`, DeepSeekServings →
  their latest body, our children → their live body. A reconcile therefore makes no LIST call.
* One reconcile for create, update and resume of a DeepSeekServing.
* A Node change that alters GPU facts, labels, taints, readiness or allocatable GPUs re-evaluates
  only the DeepSeekServings whose ``nodeSelector`` matches the node (before or after), debounced
  so a burst of node changes costs one reconcile per object.
* A child event (readiness, hand edit, deletion) reconciles its owner.
Handlers return nothing: kopf would otherwise write results into ``status``, which the
structural schema prunes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

import kopf

from deepseek_operator.controller import metrics
from deepseek_operator.controller.kube import KubeClient
from deepseek_operator.controller.reconcile import Reconciler
from deepseek_operator.names import (
    FIELD_MANAGER,
    GFD_TIMESTAMP,
    GROUP,
    KOPF_ANNOTATION_PREFIX,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    PLURAL,
    VERSION,
)
from deepseek_operator.nodes.facts import NodeFacts, NodeInventory, node_facts

log = logging.getLogger("deepseek_operator.controller")

NODE_DEBOUNCE_S = 1.0
CHILD_DEBOUNCE_S = 0.2
IGNORED_NODE_LABELS = (GFD_TIMESTAMP,)
CHILD_LABELS = {LABEL_MANAGED_BY: MANAGED_BY}


def _post_event(body: Mapping[str, Any], etype: str, reason: str, message: str) -> None:
    kopf.event(dict(body), type=etype, reason=reason, message=message)  # type: ignore[arg-type]


class _State:
    """Process-wide operator state: the API client, the reconciler and the live indexes."""

    def __init__(self) -> None:
        self.kube = KubeClient()
        self.reconciler = Reconciler(self.kube, post_event=_post_event)
        self.node_index: Any = None
        self.serving_index: Any = None
        self.child_index: Any = None
        # Latest facts per node (kept by the node index), and the facts each changed node had
        # before its change, until ``node_changed`` has acted on it.
        self.node_prints: dict[str, NodeFacts] = {}
        self.node_changes: dict[str, NodeFacts | None] = {}
        self.node_version = 0
        self._inventory: tuple[tuple[int, int], NodeInventory] | None = None
        self.pending: dict[tuple[str, str], asyncio.Task[None]] = {}

    def inventory(self) -> NodeInventory:
        """The node inventory, rebuilt only when a node's facts changed or a node went away."""
        key = (self.node_version, len(self.node_index))
        if self._inventory is None or self._inventory[0] != key:
            nodes = [f for name in self.node_index for f in self.node_index[name]]
            self._inventory = (key, NodeInventory(tuple(sorted(nodes, key=lambda n: n.name))))
        return self._inventory[1]


STATE = _State()


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Keep kopf's bookkeeping in annotations (the structural schema prunes unknown status)."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=KOPF_ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=KOPF_ANNOTATION_PREFIX, key="last-handled-configuration", ignored_fields=["status"]
    )
    # Two replicas without their peering object would both act: refuse to run instead.
    settings.peering.mandatory = not settings.peering.standalone
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.execution.max_workers = 16
    # The Kubernetes client blocks; the default pool (cores + 4 threads) serialises bursts.
    asyncio.get_running_loop().set_default_executor(
        concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="kube")
    )


# --- indexes ------------------------------------------------------------------------------------


def _fingerprint(facts: NodeFacts) -> NodeFacts:
    labels = {k: v for k, v in facts.labels.items() if k not in IGNORED_NODE_LABELS}
    return dataclasses.replace(facts, labels=labels)


@kopf.index("", "v1", "nodes")
def node_facts_index(name: str, body: kopf.Body, **_: Any) -> dict[str, NodeFacts]:
    """Node name → GPU facts (bumps the inventory version when a node's facts change)."""
    facts = _fingerprint(node_facts(body))
    old = STATE.node_prints.get(name)
    if old != facts:
        STATE.node_changes.setdefault(name, old)
        STATE.node_prints[name] = facts
        STATE.node_version += 1
    return {name: facts}


@kopf.index(GROUP, VERSION, PLURAL)
def serving_index(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    """(namespace, name) → the latest DeepSeekServing body."""
    return {(str(namespace), name): dict(body)}


def _child_entry(
    namespace: str | None, name: str, body: kopf.Body
) -> dict[tuple[str, str], tuple[str, str, dict[str, Any]]]:
    owner = (body.get("metadata", {}).get("labels") or {}).get(LABEL_INSTANCE)
    if not owner:
        return {}
    return {(str(namespace), owner): (str(body.get("kind")), name, dict(body))}


@kopf.index("apps", "v1", "deployments", labels=CHILD_LABELS)
def deployment_index(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """(namespace, owner) → our Deployments."""
    return _child_entry(namespace, name, body)


@kopf.index("apps", "v1", "statefulsets", labels=CHILD_LABELS)
def statefulset_index(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[Any, Any]:
    """(namespace, owner) → our StatefulSets."""
    return _child_entry(namespace, name, body)


@kopf.index("", "v1", "services", labels=CHILD_LABELS)
def service_index(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """(namespace, owner) → our Services."""
    return _child_entry(namespace, name, body)


def _live_children(
    namespace: str | None, name: str, *indexes: kopf.Index[Any, Any]
) -> dict[tuple[str, str], dict[str, Any]]:
    live: dict[tuple[str, str], dict[str, Any]] = {}
    for index in indexes:
        for kind, child, body in index.get((namespace, name), []):
            live[(kind, child)] = body
    return live


def _remember(kwargs: Mapping[str, Any]) -> None:
    STATE.node_index = kwargs["node_facts_index"]
    STATE.serving_index = kwargs["serving_index"]
    STATE.child_index = (
        kwargs["deployment_index"],
        kwargs["statefulset_index"],
        kwargs["service_index"],
    )


async def _run(key: tuple[str, str], trigger: str) -> None:
    """Reconcile ``key`` with whatever the indexes hold once its turn comes."""

    def body_of() -> Mapping[str, Any] | None:
        bodies = list(STATE.serving_index.get(key, []))
        return bodies[0] if bodies else None

    await STATE.reconciler.reconcile(
        key,
        body_of,
        STATE.inventory,
        lambda: _live_children(key[0], key[1], *STATE.child_index),
        trigger,
    )


# --- DeepSeekServing ----------------------------------------------------------------------------


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
async def reconcile_serving(body: kopf.Body, reason: str, **kwargs: Any) -> None:
    """Create, update and resume: decide, apply children, write status."""
    _remember(kwargs)
    meta = body.get("metadata") or {}
    try:
        await _run((str(meta.get("namespace")), str(meta.get("name"))), trigger=str(reason))
    except Exception as exc:
        raise kopf.TemporaryError(f"Reconcile failed: {exc}", delay=10) from exc


# --- Nodes --------------------------------------------------------------------------------------


def _selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _schedule(namespace: str, name: str, delay: float, trigger: str) -> None:
    """Reconcile soon; events arriving meanwhile fold into the same reconcile."""
    key = (namespace, name)
    if key in STATE.pending and not STATE.pending[key].done():
        return

    async def later() -> None:
        await asyncio.sleep(delay)
        STATE.pending.pop(key, None)
        try:
            await _run(key, trigger=trigger)
        except Exception:
            log.exception(
                "Reconcile failed",
                extra={"namespace": namespace, "name_": name, "trigger": trigger},
            )

    STATE.pending[key] = asyncio.create_task(later())


@kopf.on.event("", "v1", "nodes")
async def node_changed(name: str, type: str, body: kopf.Body, **kwargs: Any) -> None:
    """Re-evaluate the DeepSeekServings a node's GPU facts can affect (and only those)."""
    _remember(kwargs)
    new: NodeFacts | None
    if type == "DELETED":
        old, new = STATE.node_prints.pop(name, None), None
        STATE.node_changes.pop(name, None)
        STATE.node_version += 1
    elif name in STATE.node_changes:  # the index saw the facts change (facts computed there)
        old, new = STATE.node_changes.pop(name), STATE.node_prints[name]
    else:
        return  # a heartbeat or another change the decision does not read
    metrics.NODES.set(len(STATE.node_prints))
    if type is None:  # initial listing: resume reconciles every DeepSeekServing anyway
        return
    labels_before = old.labels if old else {}
    labels_after = new.labels if new else {}
    for key in list(STATE.serving_index):
        for serving in STATE.serving_index[key]:
            selector = (serving.get("spec") or {}).get("nodeSelector") or {}
            if _selector_matches(selector, labels_before) or _selector_matches(
                selector, labels_after
            ):
                _schedule(key[0], key[1], delay=NODE_DEBOUNCE_S, trigger="nodes")


# --- children -----------------------------------------------------------------------------------


async def _child_event(
    namespace: str | None, type: str, body: kopf.Body, kwargs: Mapping[str, Any]
) -> None:
    _remember(kwargs)
    meta = body.get("metadata") or {}
    if type == "DELETED":
        STATE.reconciler.child_deleted(str(namespace), str(body.get("kind")), str(meta.get("name")))
    owner = (meta.get("labels") or {}).get(LABEL_INSTANCE)
    if owner and (str(namespace), owner) in STATE.serving_index:
        _schedule(str(namespace), owner, delay=CHILD_DEBOUNCE_S, trigger="child")


@kopf.on.event("apps", "v1", "deployments", labels=CHILD_LABELS)
@kopf.on.event("apps", "v1", "statefulsets", labels=CHILD_LABELS)
@kopf.on.event("", "v1", "services", labels=CHILD_LABELS)
async def child_changed(namespace: str | None, type: str, body: kopf.Body, **kwargs: Any) -> None:
    """Readiness changes, hand edits and deletions of our children: reconcile their owner."""
    if type is not None:  # the initial listing is covered by resume
        await _child_event(namespace, type, body, kwargs)


__all__ = ["FIELD_MANAGER", "STATE"]
