"""``render --from-cluster``: the actions the operator would take against the live cluster.

The DeepSeekServing of the file is looked up in the cluster (its uid, generation and status)
together with the children the operator's watches would see for it (our labels, its name);
:mod:`deepseek_operator.actions` then says what a reconcile would do: create or apply each
child, delete the ones the plan no longer holds, patch the status, post Events. Nothing is
written. Only here does ``render`` read objects other than Nodes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from deepseek_operator.actions import (
    Action,
    after_write_actions,
    describe,
    plan_write_actions,
    split_children,
)
from deepseek_operator.actions.roles import plan_decision_actions
from deepseek_operator.api.load import ServingObject
from deepseek_operator.engine.cluster_apis import ClusterApis
from deepseek_operator.errors import InputError
from deepseek_operator.names import (
    GROUP,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    PLURAL,
    VERSION,
)
from deepseek_operator.nodes.facts import NodeInventory
from deepseek_operator.plan import ChildKey, Observed, plan


def _get(api: Any, path: str, selector: str = "") -> Any:
    """GET ``path`` (None: 404)."""
    query = [("labelSelector", selector)] if selector else []
    method, url, headers, _, _ = api.param_serialize(
        method="GET",
        resource_path=path,
        query_params=query,
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    response = api.rest_client.pool_manager.request(method, url, headers=headers, timeout=30)
    if response.status == 404:
        return None
    if response.status >= 400:
        raise InputError(f"GET {path}: HTTP {response.status}")
    return json.loads(response.data)


def cluster_objects(
    obj: ServingObject, served: set[str]
) -> tuple[Mapping[str, Any] | None, dict[ChildKey, Mapping[str, Any]]]:
    """The live DeepSeekServing of ``obj``'s name (None: not there) and its children as the
    operator's watches would see them (kinds ``served`` only)."""
    from deepseek_operator.controller.watches import CHILD_KINDS

    try:
        from deepseek_operator.kube.credentials import api_client

        api = api_client()
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{obj.namespace}/{PLURAL}/{obj.name}"
        live = _get(api, path)
        selector = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_INSTANCE}={obj.name}"
        children: dict[ChildKey, Mapping[str, Any]] = {}
        for kind in CHILD_KINDS:
            if kind.api_version != "v1" and kind.api_version not in served:
                continue
            listed = _get(api, kind.path(obj.namespace), selector) or {}
            for item in listed.get("items") or []:
                item.setdefault("apiVersion", kind.api_version)
                children[(kind.kind, str(item["metadata"]["name"]))] = item
    except Exception as exc:
        raise InputError(
            f"--from-cluster: cannot read {obj.namespace}/{obj.name}: {exc}".splitlines()[0]
        ) from None
    return live, children


def cluster_actions(
    obj: ServingObject,
    live: Mapping[str, Any] | None,
    children: Mapping[ChildKey, Mapping[str, Any]],
    inventory: NodeInventory,
    now: str,
    apis: ClusterApis,
) -> list[Action]:
    """What one reconcile of ``obj`` (as the file has it) would do, given the live objects
    (assuming every write is accepted)."""
    meta = (live or {}).get("metadata") or {}
    # Not there yet: no child is its own (a new object gets a new uid).
    obj = dataclasses.replace(
        obj, uid=str(meta.get("uid") or ""), generation=int(meta.get("generation") or 1)
    )
    ours, strangers = split_children(children, obj.uid)
    observed = Observed.from_body(live or {}, ours)
    planned = plan(obj, inventory, observed, now, apis)
    status = planned.status_dict
    writes = plan_write_actions(planned, ours, strangers, observed.raw_status, owner_name=obj.name)
    then = after_write_actions(
        status,
        [],
        writes.foreign,
        generation=obj.generation,
        now=now,
        status_only=writes.status_only,
    )
    return writes.actions + then + plan_decision_actions(observed, planned)


__all__ = ["cluster_actions", "cluster_objects", "describe"]
