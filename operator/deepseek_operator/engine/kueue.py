"""Kueue admission of a serving's workloads: what ``spec.queueName`` means here (pure).

With ``spec.queueName`` set, every engine workload (the Deployment or LeaderWorkerSet of the
serving, of each role of a disaggregated one) carries Kueue's ``kueue.x-k8s.io/queue-name`` label.
Kueue then turns each replica into a Workload (one per single-pod replica, one per LeaderWorkerSet
group with the leader and the workers as its pod sets) and keeps its pods behind a scheduling gate
until the ClusterQueue behind that LocalQueue has quota for all of it. Without Kueue the label is
inert: nothing waits. docs/kueue.md tells the whole story.
"""

from __future__ import annotations

from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.names import KUEUE_API_VERSION, KUEUE_INSTALL_HINT, KUEUE_QUEUE_LABEL


def queue_note(spec: DeepSeekServingSpec, served: bool | None) -> str | None:
    """The ``render`` command's info line about ``spec.queueName`` (None when it is unset).

    ``served``: whether the cluster serves Kueue's Workload API (None: offline, not known).
    """
    name = spec.queue_name
    if not name:
        return None
    label = f"{KUEUE_QUEUE_LABEL}={name}"
    if served is None:
        return (
            f"spec.queueName {name!r} needs Kueue: the engine workloads carry {label}, which "
            "only a cluster running Kueue acts on (each replica then starts once LocalQueue "
            f"{name!r} admits it whole); without Kueue they start as if no queue were named"
        )
    if served:
        return (
            f"spec.queueName {name!r}: this cluster runs Kueue; each replica waits until "
            f"LocalQueue {name!r} admits it whole under its ClusterQueue's quota"
        )
    return (
        f"spec.queueName {name!r} needs Kueue, which this cluster does not serve (no "
        f"{KUEUE_API_VERSION}): the label {label} has no effect; {KUEUE_INSTALL_HINT}"
    )
