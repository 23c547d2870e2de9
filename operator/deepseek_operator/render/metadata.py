"""Labels, owner references and metadata of every child of a DeepSeekServing (one home for
the label set its selectors, stores and watches rely on)."""

from __future__ import annotations

from typing import Any

from deepseek_operator.api.load import ServingObject
from deepseek_operator.names import (
    API_VERSION,
    KIND,
    KUEUE_QUEUE_LABEL,
    LABEL_COMPONENT,
    LABEL_ENDPOINT,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_PART_OF,
    LABEL_PD_ROLE,
    LABEL_SERVING,
    LLM_D_ROLE_LABEL,
    MANAGED_BY,
    PROJECT,
    SERVING_APP_NAME,
)


def selector_labels(obj: ServingObject) -> dict[str, str]:
    """Labels that select this DeepSeekServing's serving pods (of one role, for a role)."""
    labels = {LABEL_NAME: SERVING_APP_NAME, LABEL_INSTANCE: obj.serving_name}
    if obj.role:
        labels[LABEL_PD_ROLE] = obj.role
    return labels


def common_labels(obj: ServingObject) -> dict[str, str]:
    """Labels on every child object."""
    return {
        **selector_labels(obj),
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_PART_OF: PROJECT,
        LABEL_SERVING: obj.serving_name,
    }


def queue_labels(obj: ServingObject) -> dict[str, str]:
    """Kueue's queue-name label for an engine workload (Deployment, LeaderWorkerSet and the
    Deployment's pods), or nothing when ``spec.queueName`` is unset.

    Only the engines are queued: the router holds no GPUs, and queueing it would make the
    endpoint wait for quota it does not use.
    """
    name = obj.spec.queue_name
    return {KUEUE_QUEUE_LABEL: name} if name else {}


def _pod_labels(obj: ServingObject, head: bool) -> dict[str, str]:
    """A role's pods also carry the role label llm-d's endpoint picker reads, and those that
    serve HTTP the label an InferencePool selects."""
    if not obj.role:
        return {}
    return {LLM_D_ROLE_LABEL: obj.role, **({LABEL_ENDPOINT: "true"} if head else {})}


def owner_references(obj: ServingObject) -> list[dict[str, Any]]:
    """The controller owner reference (empty offline, where the uid is unknown)."""
    if not obj.uid:
        return []
    return [
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": obj.serving_name,
            "uid": obj.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def _metadata(
    obj: ServingObject, name: str, extra_labels: dict[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": obj.namespace,
        "labels": {**common_labels(obj), **(extra_labels or {})},
    }
    owners = owner_references(obj)
    if owners:
        meta["ownerReferences"] = owners
    return meta


def child_metadata(obj: ServingObject) -> dict[str, Any]:
    """The metadata of a serving-wide child (labels and owner, no role), named after it."""
    return _metadata(obj, obj.name, {LABEL_COMPONENT: "routing"})


def restricted_container_security() -> dict[str, Any]:
    """A container securityContext that meets the restricted Pod Security Standard with a
    read-only root: what the operator's own containers (the router, the weights fill) run with."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
