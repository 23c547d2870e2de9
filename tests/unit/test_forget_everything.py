"""1,000 DeepSeekServings created, reconciled and deleted leave no per-object state behind.

The real :class:`OperatorState` (records, queue, child stores, reconciler) is driven by the
events its watches deliver, in the order the API server sends them: our writes come back as
MODIFIED/ADDED events after their responses, a delete as DELETED, then garbage collection
deletes the children. The API is an in-memory fake (no kopf, no server); what is counted is
every place the operator keeps something per object.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import yaml

from deepseek_operator.controller.state import OperatorState
from deepseek_operator.engine.cluster_apis import ClusterApis
from deepseek_operator.kube.client import EncodedObject
from tests.unit.factories import gb200_pool

SEED = yaml.safe_load(open("examples/dsv41-flash-gb200.yaml").read())  # noqa: SIM115
COUNT = 1000


class EventingKube:
    """Answers writes like the API server and queues the watch events they cause."""

    def __init__(self) -> None:
        self.rv = 1000
        self.events: list[tuple[str, ...] | Any] = []
        self.children: dict[tuple[str, str, str], dict[str, Any]] = {}  # (ns, kind, name)

    def _next(self) -> str:
        self.rv += 1
        return str(self.rv)

    async def apply(self, encoded: Any, only_if_ours: str | None = None) -> dict[str, Any]:
        obj = encoded.decoded() if isinstance(encoded, EncodedObject) else encoded
        out = copy.deepcopy(obj)
        out["metadata"]["resourceVersion"] = self._next()
        meta = out["metadata"]
        key = (meta["namespace"], out["kind"], meta["name"])
        etype = "MODIFIED" if key in self.children else "ADDED"
        self.children[key] = out
        self.events.append(("child", out["kind"], etype, f"{key[0]}/{key[2]}", out))
        return copy.deepcopy(out)

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        body = self.children.pop((namespace, kind, name), None)
        if body is not None:
            self.events.append(("child", kind, "DELETED", f"{namespace}/{name}", body))

    async def check_owner(self, namespace: str, name: str, uid: str) -> None:
        return None

    async def patch_status(
        self, namespace: str, name: str, uid: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        rv = self._next()
        self.events.append(("status", namespace, name, uid, rv, copy.deepcopy(status)))
        return {"metadata": {"resourceVersion": rv}, "status": status}


def _body(i: int, rv: str = "1") -> dict[str, Any]:
    body = copy.deepcopy(SEED)
    body["metadata"] = {
        "name": f"d{i}",
        "namespace": f"ns{i % 7}",
        "generation": 1,
        "uid": f"uid-{i}",
        "resourceVersion": rv,
    }
    return body


def test_a_thousand_servings_created_and_deleted_leave_nothing_behind() -> None:
    async def scenario() -> tuple[dict[str, int], dict[str, int], int]:
        state = OperatorState()
        kube = EventingKube()
        rec = state.reconciler
        rec.kube = kube  # type: ignore[assignment]
        rec.post_event = None
        rec.apis_fresh = ClusterApis
        inv = gb200_pool()
        state.nodes.inventory = lambda: inv  # type: ignore[method-assign]
        state.nodes_listed.set()
        state.children_listed.set()
        bodies = {i: _body(i) for i in range(COUNT)}

        async def deliver() -> None:
            while kube.events:
                event = kube.events.pop(0)
                if event[0] == "child":
                    _, kind, etype, key, body = event
                    state.owned_seen(kind, etype, key, body)
                else:
                    _, _ns, name, uid, rv, status = event
                    i = int(name[1:])
                    if bodies[i]["metadata"]["uid"] != uid:
                        continue
                    bodies[i] = {**bodies[i], "status": status}
                    bodies[i]["metadata"] = {**bodies[i]["metadata"], "resourceVersion": rv}
                    state.serving_seen("MODIFIED", bodies[i])

        for i in range(COUNT):
            trigger = state.serving_seen("ADDED", bodies[i])
            assert trigger == "create"
            await state.run_reconcile((f"ns{i % 7}", f"d{i}"), trigger)
            await deliver()
        # a node change asks every object for a (debounced) reconcile: some are still pending
        # when their object goes
        state.nodes_changed(
            [type("Change", (), {"may_affect": staticmethod(lambda selector: True)})()]
        )
        busy = state.remembered()
        for i in range(COUNT):
            state.serving_seen("DELETED", bodies[i])
            for key in [k for k in kube.children if k[0] == f"ns{i % 7}"]:
                if kube.children[key]["metadata"]["name"].startswith(f"d{i}"):
                    await kube.delete("", key[1], key[0], key[2])  # garbage collection
            await deliver()
        await asyncio.sleep(1.5)  # any reconcile still asleep would have run by now
        await deliver()
        return busy, state.remembered(), state.records.tombstones()

    busy, left, tombstones = asyncio.run(scenario())
    assert busy["records"] == COUNT and busy["owners"] == COUNT and busy["pending"] == COUNT
    assert left == dict.fromkeys(left, 0), left
    # Only the bounded list of deleted uids remains (so a late event never revives one).
    assert tombstones == COUNT
