"""The status the operator writes for a decision and the observed readiness (pure).

``now`` is passed in (the pure core never reads the clock). A condition keeps its previous
``lastTransitionTime`` unless its ``status`` flips, as metav1.Condition requires.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from deepseek_operator import names as N
from deepseek_operator.api import status as S
from deepseek_operator.engine.capacity_report import gib
from deepseek_operator.engine.cluster_apis import ComputeDomainMode
from deepseek_operator.engine.kueue import Admission
from deepseek_operator.engine.layout_advice import advice_line
from deepseek_operator.engine.queueing import WorkloadSize
from deepseek_operator.engine.resolution import Resolution

# The API server caps a condition message at 32,768 characters; refusals stay far below.
MAX_CONDITION_MESSAGE = 4000
# Between the Ready message and its summary of multi-pod groups.
GROUPS_SEPARATOR = "; groups: "


def condition(
    ctype: str,
    *,
    ok: bool,
    reason: str,
    message: str,
    generation: int,
    now: str,
    previous: Sequence[S.Condition],
) -> S.Condition:
    """The condition ``ctype``: ``lastTransitionTime`` carried over from ``previous`` unless the
    status flips (metav1.Condition's rule; the one place it is written)."""
    status: Literal["True", "False"] = "True" if ok else "False"
    since = now
    for old in previous:
        if old.type == ctype and old.status == status and old.last_transition_time:
            since = old.last_transition_time
    return S.Condition(
        type=ctype,
        status=status,
        reason=reason,
        message=message,
        observed_generation=generation,
        last_transition_time=since,
    )


def build_status(
    res: Resolution,
    *,
    generation: int,
    ready_replicas: int,
    now: str,
    previous_conditions: Sequence[S.Condition] = (),
    observed: bool = True,
    pod_refusal: str | None = None,
    workload_size: WorkloadSize | None = None,
    groups: Sequence[S.GroupStatus] = (),
    admission: Admission | None = None,
) -> S.DeepSeekServingStatus:
    """The whole status: resolved values, decision with checks, replicas, the conditions.

    ``observed`` is False for the offline preview, where no pods can have been seen.
    ``pod_refusal`` is a child controller's FailedCreate message (e.g. Pod Security admission).
    ``workload_size``: how many replicas the workload asks for; the replicas it holds back are said
    in the Placeable (and a not-ready Ready) message.
    ``groups``: the multi-pod replicas as their pods show them (the Ready message sums them up).
    ``admission``: Kueue's verdict (``spec.queueName`` only): the Admitted condition, and a
    not-ready Ready that says it waits for quota rather than for nodes.
    The WorkloadApplied condition is carried over as last written: only the reconciler, after
    its writes, knows whether the API server accepted them (:func:`with_workload_applied`).
    """
    placement = res.placement
    placement_message = placement.message + (workload_size.note() if workload_size else "")
    backend_msg = res.message
    conditions = [
        condition(
            N.BACKEND_RESOLVED,
            ok=res.backend_runnable,
            reason=res.condition_reason,
            message=backend_msg,
            generation=generation,
            now=now,
            previous=previous_conditions,
        ),
        condition(
            N.PLACEABLE,
            ok=placement.placeable,
            reason=placement.reason
            or (N.REASON_ENOUGH_NODES if placement.placeable else N.REASON_INSUFFICIENT_NODES),
            message=placement_message,
            generation=generation,
            now=now,
            previous=previous_conditions,
        ),
    ]
    compute_domain = _compute_domain_condition(res)
    if compute_domain is not None:
        ok, reason, message = compute_domain
        conditions.append(
            condition(
                N.COMPUTE_DOMAIN,
                ok=ok,
                reason=reason,
                message=message,
                generation=generation,
                now=now,
                previous=previous_conditions,
            )
        )
    all_ready = ready_replicas >= res.replicas
    workload = next((c for c in previous_conditions if c.type == N.WORKLOAD_APPLIED), None)
    if not res.backend_runnable:
        ready_reason, ready_msg = (
            N.REASON_BACKEND_UNRUNNABLE,
            f"{res.requested} cannot run: {res.reason}",
        )
    elif workload is not None and workload.status == "False":
        ready_reason, ready_msg = (workload.reason, workload.message)
    elif pod_refusal and not all_ready:
        ready_reason, ready_msg = (
            N.REASON_PODS_REFUSED,
            f"{ready_replicas}/{res.replicas} replicas ready; {pod_refusal}",
        )
    elif admission is not None and not admission.ok and not all_ready:
        ready_reason, ready_msg = (
            N.REASON_WAITING_FOR_QUOTA,
            f"{ready_replicas}/{res.replicas} replicas ready; waiting for quota: "
            f"{admission.message}",
        )
    elif not placement.placeable and not all_ready:
        ready_reason, ready_msg = (
            N.REASON_NOT_PLACEABLE,
            f"{ready_replicas}/{res.replicas} replicas ready; {placement_message}",
        )
    elif all_ready:
        ready_reason, ready_msg = (
            N.REASON_ALL_REPLICAS_READY,
            f"{ready_replicas}/{res.replicas} replicas ready",
        )
    else:
        suffix = "" if observed else " (offline preview: no pods observed)"
        ready_reason, ready_msg = (
            N.REASON_REPLICAS_NOT_READY,
            f"{ready_replicas}/{res.replicas} replicas ready{suffix}",
        )
    # The layout advice joins the plain replica count only: a refusal or a workload that could
    # not be applied stays the message's one subject.
    advice = advice_line(res.capacity.layouts) if res.capacity is not None else ""
    if advice and ready_reason in (N.REASON_ALL_REPLICAS_READY, N.REASON_REPLICAS_NOT_READY):
        ready_msg += f"; {advice}"
    if groups:
        ready_msg += GROUPS_SEPARATOR + "; ".join(_group_summary(g) for g in groups)
    conditions.append(
        condition(
            N.READY,
            ok=all_ready and res.backend_runnable,
            reason=ready_reason,
            message=ready_msg,
            generation=generation,
            now=now,
            previous=previous_conditions,
        )
    )
    if admission is not None:
        conditions.append(
            condition(
                N.ADMITTED,
                ok=admission.ok,
                reason=admission.reason,
                message=admission.message,
                generation=generation,
                now=now,
                previous=previous_conditions,
            )
        )
    if workload is not None:
        conditions.append(workload)
    return S.DeepSeekServingStatus(
        observed_generation=generation,
        resolved=S.Resolved(
            moe_backend=res.moe_backend,
            sequence_parallel=res.sequence_parallel,
            expert_parallel_size=res.expert_parallel_size,
            gpus_per_pod=res.gpus_per_pod,
            pods_per_replica=res.pods_per_replica,
            eligible_nodes=len(placement.eligible),
            clique_label=res.clique_key,
            nvlink_cliques=list(placement.holding_cliques) if res.clique_key else None,
            vllm_version=res.vllm_version,
        ),
        decision=S.Decision(
            requested=res.requested,
            reason=res.reason,
            message=res.message,
            checks=[c.to_status() for c in res.checks],
        ),
        replicas=res.replicas,
        ready_replicas=ready_replicas,
        capacity=capacity_status(res),
        groups=list(groups) or None,
        conditions=conditions,
    )


def capacity_status(res: Resolution) -> list[S.CapacityStatus] | None:
    """``status.capacity``: the capacity model's figures per GPU type (None when unknown)."""
    if res.capacity is None or not res.capacity.rows:
        return None
    return [
        S.CapacityStatus(
            gpu_product=row.gpu.product,
            gpu_memory_mib=row.gpu.memory_bytes // 2**20,
            gpu_memory_source=row.gpu.source,
            backend=res.capacity.path,
            weights_gib=gib(row.weights.total),
            symmetric_buffer_gib=gib(row.symmetric_buffer),
            kv_cache_gib=gib(row.kv_bytes),
            tokens=row.tokens,
            concurrent_requests=f"{row.concurrent_requests:.2f}",
            max_model_len=row.max_model_len,
            layouts=[
                S.LayoutOptionStatus(
                    tensor_parallel_size=o.tensor_parallel,
                    data_parallel_size=o.data_parallel,
                    expert_parallel=o.expert_parallel,
                    concurrent_requests=f"{o.concurrent_requests:.2f}",
                    kv_layout=o.kv_layout,
                    chosen=o.chosen,
                )
                for o in res.capacity.layouts
                if o.gpu_product == row.gpu.product
            ]
            or None,
        )
        for row in res.capacity.rows
    ]


def _group_summary(group: S.GroupStatus) -> str:
    """``1 in <clique>: 3/4 pods ready`` (or ``not scheduled``, ``not in an NVLink clique``)."""
    if group.clique:
        where = f"in {group.clique}"
    elif any(group.nodes):
        where = "not in an NVLink clique"
    else:
        where = "not scheduled"
    return f"{group.index} {where}: {group.pods_ready}/{group.pods_total} pods ready"


def _compute_domain_condition(res: Resolution) -> tuple[bool, str, str] | None:
    """The ComputeDomain condition of a multi-node NVLink replica, None where none applies."""
    mode = res.compute_domain
    if mode is ComputeDomainMode.NOT_NEEDED:
        return None
    if mode is ComputeDomainMode.RENDERED:
        return (
            True,
            N.REASON_COMPUTE_DOMAIN_RENDERED,
            "each pod claims an IMEX channel from this DeepSeekServing's ComputeDomain "
            "(NVIDIA DRA driver), so ranks on different trays can share GPU memory over NVLink",
        )
    if mode is ComputeDomainMode.DISABLED:
        return (
            False,
            N.REASON_COMPUTE_DOMAIN_DISABLED,
            "ComputeDomains are turned off (chart value computeDomain.enabled=false): the pods "
            "get no IMEX channel from the operator; cross-tray NVLink needs one from elsewhere",
        )
    return (
        False,
        N.REASON_DRA_DRIVER_MISSING,
        "the replicas span trays of a multi-node NVLink clique, which needs an IMEX channel per "
        "workload, and the cluster has no ComputeDomain API (resource.nvidia.com/v1beta1): "
        "install NVIDIA's DRA driver for GPUs with ComputeDomains enabled; without it the "
        "workers fail with 'Application timeout caused pair closure' before loading weights",
    )


def status_dict(status: S.DeepSeekServingStatus) -> dict[str, Any]:
    """The status as the camelCase JSON object written to the API server."""
    return status.model_dump(by_alias=True, mode="json", exclude_none=True)


def invalid_spec_status(
    previous: Mapping[str, Any],
    previous_conditions: Sequence[S.Condition],
    *,
    generation: int,
    message: str,
    now: str,
) -> dict[str, Any]:
    """``previous`` status with BackendResolved and Ready False (InvalidSpec) for ``message``.

    For a spec the API server's CEL rules should have refused (e.g. a CRD older than the
    operator); the last decision and checks stay visible.
    """
    conditions = [
        condition(
            ctype,
            ok=False,
            reason=N.REASON_INVALID_SPEC,
            message=message,
            generation=generation,
            now=now,
            previous=previous_conditions,
        ).model_dump(by_alias=True, mode="json")
        for ctype in (N.BACKEND_RESOLVED, N.READY)
    ]
    return {**previous, "observedGeneration": generation, "conditions": conditions}


def with_workload_applied(
    status: Mapping[str, Any],
    refused: Sequence[str],
    *,
    generation: int,
    now: str,
    foreign: Sequence[str] = (),
) -> dict[str, Any]:
    """``status`` with WorkloadApplied set from this reconcile's writes (pure).

    ``refused`` holds one ``Kind/name: <the API server's words>`` per refused child (any HTTP
    error answer, 4xx or 5xx); ``foreign`` one sentence per child not written because an object
    of its name is not ours. Reason ForeignObjectInTheWay when any is in the way (the user's
    move, not the spec's), WorkloadRefused otherwise; Ready turns False with the same reason
    and message.
    """
    previous = [S.Condition.model_validate(c) for c in status.get("conditions") or []]
    ok = not refused and not foreign
    parts = list(foreign)
    if refused:
        parts.append("the API server refused " + "; ".join(refused))
    message = ("the API server accepted every child object" if ok else "; ".join(parts))[
        :MAX_CONDITION_MESSAGE
    ]
    if ok:
        reason = N.REASON_APPLIED
    else:
        reason = N.REASON_FOREIGN_OBJECT if foreign else N.REASON_WORKLOAD_REFUSED
    applied = condition(
        N.WORKLOAD_APPLIED,
        ok=ok,
        reason=reason,
        message=message,
        generation=generation,
        now=now,
        previous=previous,
    )
    conditions: list[S.Condition] = []
    for cond in previous:
        if cond.type == N.WORKLOAD_APPLIED:
            continue
        if cond.type == N.READY and not ok:
            # The groups' summary stays, as :func:`build_status` writes it, so the next
            # reconcile's status equals this one (no rewrite, no second Event).
            _, sep, groups = cond.message.partition(GROUPS_SEPARATOR)
            ready_msg = message + sep + groups
            cond = condition(
                N.READY,
                ok=False,
                reason=reason,
                message=ready_msg,
                generation=generation,
                now=now,
                previous=previous,
            )
        conditions.append(cond)
    conditions.append(applied)
    return {
        **status,
        "conditions": [
            c.model_dump(by_alias=True, mode="json", exclude_none=True) for c in conditions
        ],
    }
