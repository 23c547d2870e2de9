"""The ``WeightsReady`` condition of a filled cache, pure: may vLLM pods start, and why not.

:func:`weights_state` turns the facts of the fill (:class:`~.fill_progress.FillObserved`, gathered
by the controller) into the condition, the ``status.weights`` progress and what to do next
(create the Job, look again); :func:`with_weights` writes them into the status. The Job itself is
:mod:`.fill_job`'s; reading its progress, :mod:`.fill_progress`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deepseek_operator.api import status as S
from deepseek_operator.api.load import ServingObject
from deepseek_operator.catalog.gpu_memory import GIB
from deepseek_operator.catalog.models import find_checkpoint
from deepseek_operator.names import (
    READY,
    REASON_WEIGHTS_CACHE_TOO_SMALL,
    REASON_WEIGHTS_CLAIM_MISSING,
    REASON_WEIGHTS_FAILED,
    REASON_WEIGHTS_FILLED,
    REASON_WEIGHTS_FILLING,
    REASON_WEIGHTS_NOT_READY,
    REASON_WEIGHTS_PENDING,
    REASON_WEIGHTS_RETRYING,
    REASON_WEIGHTS_REVISION_REQUIRED,
    WEIGHTS_READY,
)
from deepseek_operator.nodes.dra_device import parse_quantity_bytes
from deepseek_operator.render.fill_job import serving_fill_job_name
from deepseek_operator.render.fill_progress import (
    FillObserved,
    exit_cause,
    failure_line,
    job_condition,
    last_report,
    running_status,
)
from deepseek_operator.render.status import condition


@dataclass(frozen=True)
class WeightsState:
    """The decision: may vLLM pods start, the condition, the progress and what to do next."""

    ready: bool
    reason: str
    message: str
    status: S.WeightsStatus | None
    create_job: bool = False  # the fill Job does not exist and may be created now
    poll: bool = False  # the fill runs: look again soon (its progress changes nothing we watch)


def checkpoint_bytes(model: str) -> int | None:
    """The checkpoint's size from the catalogue (None where it is not known)."""
    facts = find_checkpoint(model)
    if facts is None or facts.checkpoint_gib is None:
        return None
    return int(facts.checkpoint_gib * GIB)


def weights_state(
    serving: ServingObject,
    observed: FillObserved,
    previous: S.WeightsStatus | None,
    now: str,
) -> WeightsState:
    """Whether ``serving``'s weights are in its cache, and what ``WeightsReady`` says (pure).

    In order: the revision must be pinned, the claim must exist and, where the catalogue knows
    the checkpoint's size, request at least that much; then the Job decides: absent (create it),
    complete (ready), failed (the cause's one line), or running (its last progress line).
    """
    spec = serving.spec
    job_name = serving_fill_job_name(serving)
    claim = spec.model_cache.claim_name or ""
    if not spec.model.revision:
        return WeightsState(
            False,
            REASON_WEIGHTS_REVISION_REQUIRED,
            "spec.modelCache.fill needs spec.model.revision: the commit (or branch or tag) to "
            "fill and serve; a commit hash pins the checkpoint for good",
            None,
        )
    if not observed.claim_found:
        return WeightsState(
            False,
            REASON_WEIGHTS_CLAIM_MISSING,
            f"PersistentVolumeClaim {claim} (spec.modelCache.claimName) does not exist in "
            f"namespace {serving.namespace}: create it (ReadWriteMany, at least the checkpoint's "
            "size) and the fill starts",
            None,
        )
    needed = checkpoint_bytes(spec.model.name)
    requested = parse_quantity_bytes(observed.claim_request or "")
    if needed is not None and requested is not None and requested < needed:
        return WeightsState(
            False,
            REASON_WEIGHTS_CACHE_TOO_SMALL,
            f"PersistentVolumeClaim {claim} requests {observed.claim_request} "
            f"({requested / GIB:.1f} GiB) but {spec.model.name} needs about "
            f"{needed / GIB:.1f} GiB: give the claim at least {needed / GIB:.0f}Gi",
            None,
        )
    job = observed.job
    if job is None:
        return WeightsState(
            False,
            REASON_WEIGHTS_PENDING,
            f"creating fill Job {job_name}",
            S.WeightsStatus(job=job_name, observed_at=now, progress="pending"),
            create_job=True,
            poll=True,
        )
    if job_condition(job, "Complete") is not None:
        report = last_report(observed.pod.log_tail) if observed.pod else None
        total = int((report or {}).get("bytesTotal") or (previous.bytes_total if previous else 0))
        files = int((report or {}).get("filesTotal") or (previous.files_total if previous else 0))
        done = S.WeightsStatus(
            job=job_name,
            bytes_done=total,
            bytes_total=total,
            files_done=files,
            files_total=files,
            observed_at=now,
            progress="filled",
        )
        if previous is not None and previous.model_copy(update={"observed_at": now}) == done:
            done = previous  # unchanged since it was filled: nothing to write
        return WeightsState(
            True,
            REASON_WEIGHTS_FILLED,
            f"fill Job {job_name} completed: {spec.model.name} at {spec.model.revision} is in "
            f"{claim}",
            done,
        )
    if job_condition(job, "Failed") is not None:
        line = failure_line(job_name, job, observed.failed_pod or observed.pod)
        return WeightsState(
            False,
            REASON_WEIGHTS_FAILED,
            line,
            S.WeightsStatus(job=job_name, observed_at=now, progress="failed"),
        )
    report = last_report(observed.pod.log_tail) if observed.pod else None
    base = previous if previous is not None and previous.job == job_name else None
    status = running_status(job_name, report, base, now)
    failed_before = observed.failed_pod
    if failed_before is not None and failed_before.exit_code is not None:
        cause = exit_cause(failed_before.exit_code)
        return WeightsState(
            False,
            REASON_WEIGHTS_RETRYING,
            f"fill Job {job_name}: a pod ended with exit code {failed_before.exit_code} "
            f"({cause}); the retry resumes from the volume: {status.progress}",
            status,
            poll=True,
        )
    return WeightsState(
        False,
        REASON_WEIGHTS_FILLING,
        f"fill Job {job_name}: {status.progress}",
        status,
        poll=True,
    )


def with_weights(
    status: S.DeepSeekServingStatus,
    state: WeightsState,
    *,
    generation: int,
    now: str,
    previous: Sequence[S.Condition],
) -> S.DeepSeekServingStatus:
    """``status`` with the ``WeightsReady`` condition and ``status.weights`` of ``state``."""
    cond = condition(
        WEIGHTS_READY,
        ok=state.ready,
        reason=state.reason,
        message=state.message,
        generation=generation,
        now=now,
        previous=previous,
    )
    conditions = [c for c in status.conditions if c.type != WEIGHTS_READY] + [cond]
    if not state.ready:
        # Ready says why no replica runs: the weights, not the pods (there are none yet).
        conditions = [
            condition(
                READY,
                ok=False,
                reason=REASON_WEIGHTS_NOT_READY,
                message=f"no vLLM pod before the weights are in the cache: {state.message}",
                generation=generation,
                now=now,
                previous=previous,
            )
            if c.type == READY and c.status == "False"
            else c
            for c in conditions
        ]
    return status.model_copy(update={"conditions": conditions, "weights": state.status})
