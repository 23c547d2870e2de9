"""The I/O half of ``spec.modelCache.fill``: read the claim, the fill Job, its pods and log; create
the Job once and add each serving to its owners.

The decisions (which Job, is it done, what ``WeightsReady`` says) are the pure
:mod:`deepseek_operator.render.fill_job`'s, :mod:`~deepseek_operator.render.fill_progress`'s and
:mod:`~deepseek_operator.render.weights`'; this module only gathers their inputs and carries out
the one write they ask for. The fill pod has no API rights: what it reports is read here, from its
terminated state (exit code and termination message) and the last lines of its log through the
``pods/log`` subresource. Nothing watches Jobs or their pods: while a fill is not done the
reconciler looks again every few seconds (:data:`POLL_FILLING_S`).
"""

from __future__ import annotations

import datetime as dt
import logging

from deepseek_operator.api.load import ServingObject
from deepseek_operator.api.status import WeightsStatus
from deepseek_operator.engine.cluster_apis import ClusterApis
from deepseek_operator.kube.client import KubeClient
from deepseek_operator.names import FILL_CONTAINER
from deepseek_operator.plan import Observed, Plan, with_weights_gate
from deepseek_operator.render.fill_job import (
    owner_reference,
    render_fill_job,
    serving_fill_job_name,
)
from deepseek_operator.render.fill_progress import (
    LOG_TAIL_LINES,
    FillObserved,
    FillPod,
    fill_pod,
    job_condition,
)
from deepseek_operator.render.weights import WeightsState, weights_state

log = logging.getLogger("deepseek_operator.controller")

POLL_FILLING_S = 5.0
"""Seconds between two looks at a running fill (its progress line is read each time)."""
POLL_WAITING_S = 15.0
"""Seconds between two looks at a fill that waits for the user (a claim, a failed Job deleted)."""

_JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"


async def observe_fill(
    kube: KubeClient, serving: ServingObject, previous: WeightsStatus | None = None
) -> FillObserved:
    """What the cluster shows of ``serving``'s fill: its claim, Job, newest pod (with the tail of
    its log) and newest pod that failed with an exit code. A complete Job whose totals the last
    status (``previous``) holds is not looked into again: its pods and log cannot change."""
    ns = serving.namespace
    claim_name = serving.spec.model_cache.claim_name or ""
    claim = await kube.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim_name}")
    if claim is None:
        return FillObserved(claim_found=False)
    requests = ((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}
    request = requests.get("storage")
    job_name = serving_fill_job_name(serving)
    job = await kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{job_name}")
    if job is None:
        return FillObserved(claim_found=True, claim_request=request)
    complete = job_condition(job, "Complete") is not None
    if complete and previous is not None and previous.job == job_name and previous.bytes_total:
        return FillObserved(claim_found=True, claim_request=request, job=job)
    uid = str((job.get("metadata") or {}).get("uid") or "")
    listed = await kube.get(
        f"/api/v1/namespaces/{ns}/pods", [("labelSelector", f"{_JOB_UID_LABEL}={uid}")]
    )
    pods = sorted(
        (listed or {}).get("items") or [],
        key=lambda p: (
            str((p.get("metadata") or {}).get("creationTimestamp") or ""),
            str((p.get("metadata") or {}).get("name") or ""),
        ),
    )
    facts = [fill_pod(p) for p in pods]
    newest = facts[-1] if facts else None
    failed = next((f for f in reversed(facts) if f.exit_code not in (None, 0)), None)
    if newest is not None and newest.phase in ("Running", "Succeeded"):
        try:
            tail = await kube.get_text(
                f"/api/v1/namespaces/{ns}/pods/{newest.name}/log",
                [("container", FILL_CONTAINER), ("tailLines", str(LOG_TAIL_LINES))],
            )
        except Exception as exc:  # a kubelet out of reach: the progress waits, the fill goes on
            log.warning(
                "Reading the fill pod's log failed: %s: %s",
                type(exc).__name__,
                exc,
                extra={"namespace": ns, "name_": newest.name},
            )
        else:
            newest = FillPod(newest.name, newest.phase, newest.exit_code, newest.message, tail)
    return FillObserved(
        claim_found=True, claim_request=request, job=job, pod=newest, failed_pod=failed
    )


async def carry_out(
    kube: KubeClient,
    serving: ServingObject,
    observed: FillObserved,
    state: WeightsState,
    image: str,
) -> None:
    """The one write the state asks for: create the Job, or add ``serving`` to its owners."""
    ns = serving.namespace
    if state.create_job:
        try:
            await kube.write(
                "POST", f"/apis/batch/v1/namespaces/{ns}/jobs", render_fill_job(serving, image)
            )
        except Exception as exc:
            if getattr(exc, "status", None) != 409:  # another serving created it meanwhile
                raise
        return
    job = observed.job
    if job is None:
        return
    owners = (job.get("metadata") or {}).get("ownerReferences") or []
    if any(o.get("uid") == serving.uid for o in owners) or not serving.uid:
        return
    # A strategic merge patch merges ownerReferences by uid: the other owners stay.
    await kube.write(
        "PATCH",
        f"/apis/batch/v1/namespaces/{ns}/jobs/{serving_fill_job_name(serving)}",
        {"metadata": {"ownerReferences": [owner_reference(serving)]}},
        "application/strategic-merge-patch+json",
    )


def utc_now() -> str:
    """The clock of every status time the operator writes: RFC 3339, whole seconds, UTC."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def behind_weights(
    kube: KubeClient,
    serving: ServingObject,
    observed: Observed,
    planned: Plan,
    apis: ClusterApis,
    recheck: float | None,
) -> tuple[Plan, float | None]:
    """``planned`` behind ``serving``'s fill, if it asks for one (``spec.modelCache.fill``): its
    children held until the weights are in the cache; and the recheck, shortened to the next
    look at the fill while it is not done. The weights come first: no vLLM pod waits for them."""
    if serving.spec.model_cache.fill is None:
        return planned, recheck
    now = utc_now()
    seen = await observe_fill(kube, serving, observed.weights)
    state = weights_state(serving, seen, observed.weights, now)
    await carry_out(kube, serving, seen, state, apis.fill_image)
    planned = with_weights_gate(planned, state, observed, serving.generation, now)
    if state.ready:
        return planned, recheck
    again = POLL_FILLING_S if state.poll else POLL_WAITING_S
    return planned, again if recheck is None else min(recheck, again)
