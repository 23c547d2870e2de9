"""The operator-managed weights fill (``spec.modelCache.fill``), pure: which Job, is it done, and
what ``WeightsReady`` says.

One fill Job per (claim, model, revision), named from a hash of the three, so every serving of the
same checkpoint on the same claim finds the same Job: the first to look creates it, the others
add themselves to its owner references (never as controller), and the garbage collector removes
it with the last of them. The Job runs ``deepseek-operator fill-weights`` under the restricted Pod
Security level with no ServiceAccount token; the token reaches it only as an env var from the
user's Secret (a ``secretKeyRef``), so no object the operator writes holds it.

What the operator reads back needs no API rights in the fill pod: the Job's conditions, the pod's
terminated state (exit code: the cause, :data:`~deepseek_operator.names.FILL_EXIT_CODES`; its
message: the one line the command writes to its termination log) and the last JSON lines of its
log (``pods/log`` with ``tailLines``). :func:`weights_state` turns those facts, gathered by the
controller, into the condition, the ``status.weights`` progress and whether vLLM pods may start.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deepseek_operator.api import status as S
from deepseek_operator.api.load import ServingObject
from deepseek_operator.catalog.models import find_checkpoint
from deepseek_operator.names import (
    API_VERSION,
    FILL_COMPONENT,
    FILL_CONTAINER,
    FILL_EXIT_CODES,
    FILL_FATAL_CAUSES,
    FILL_JOB_PREFIX,
    FILL_USER,
    GROUP,
    KIND,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    MANAGED_BY,
    PROJECT,
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
from deepseek_operator.render.status import condition

FILL_HF_HOME = "/cache"
"""Where the fill pod mounts the claim (its ``--hf-home``); the vLLM pods' mountPath may differ:
the cache's links are relative."""
TERMINATION_LOG = "/dev/termination-log"
FILL_BACKOFF_LIMIT = 6
"""Retries of a fill pod that failed for a cause a retry may cure (network, busy, killed): each
resumes from what is on the volume."""
LOG_TAIL_LINES = 20
"""Log lines the controller reads from a running fill pod (the last progress line is among them:
the command writes nothing else between two of them but the client's rare warnings)."""
ANNOTATION_MODEL = f"{GROUP}/model"
ANNOTATION_REVISION = f"{GROUP}/revision"
ANNOTATION_CLAIM = f"{GROUP}/claim"
_CAUSE_OF_CODE = {code: cause for cause, code in FILL_EXIT_CODES.items()}
_GIB = 1024**3


def fill_enabled(serving: ServingObject) -> bool:
    """Whether ``serving`` asks the operator to fill its cache."""
    return serving.spec.model_cache.fill is not None


def fill_job_name(claim: str, model: str, revision: str) -> str:
    """The one Job name of (claim, model, revision): readable prefix, hash of all three.

    At most 49 characters, so the ``job-name`` label the Job controller puts on its pods (63 at
    most) always fits.
    """
    digest = hashlib.sha256(f"{claim}\n{model}\n{revision}".encode()).hexdigest()[:10]
    base = re.sub(r"[^a-z0-9]+", "-", model.rsplit("/", 1)[-1].lower()).strip("-")[:30]
    return f"{FILL_JOB_PREFIX}{base.rstrip('-') or 'model'}-{digest}"


def serving_fill_job_name(serving: ServingObject) -> str:
    """The fill Job of ``serving`` (its claim, model and revision)."""
    spec = serving.spec
    return fill_job_name(
        spec.model_cache.claim_name or "", spec.model.name, spec.model.revision or ""
    )


def owner_reference(serving: ServingObject) -> dict[str, Any]:
    """``serving`` as one of the fill Job's owners: not its controller (the Job is shared), and
    not blocking deletion (a serving deleted while its fill runs goes at once)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": serving.name,
        "uid": serving.uid,
    }


def render_fill_job(serving: ServingObject, image: str) -> dict[str, Any]:
    """The fill Job of ``serving``, owned by it (the controller adds the other owners later)."""
    spec = serving.spec
    cache = spec.model_cache
    fill = cache.fill
    assert fill is not None and cache.claim_name
    name = serving_fill_job_name(serving)
    labels = {
        LABEL_NAME: PROJECT,
        LABEL_COMPONENT: FILL_COMPONENT,
        LABEL_MANAGED_BY: MANAGED_BY,
    }
    env: list[dict[str, Any]] = []
    if fill.token_secret_ref is not None:
        # Read by the command from HF_TOKEN; the value stays in the Secret.
        ref = fill.token_secret_ref
        env.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}},
            }
        )
    if fill.endpoint:
        env.append({"name": "HF_ENDPOINT", "value": fill.endpoint})
    container = {
        "name": FILL_CONTAINER,
        "image": image,
        "args": [
            "fill-weights",
            f"--model={spec.model.name}",
            f"--revision={spec.model.revision}",
            f"--hf-home={FILL_HF_HOME}",
            f"--termination-log={TERMINATION_LOG}",
        ],
        "env": env,
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "resources": {"requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
        "volumeMounts": [
            {"name": "weights", "mountPath": FILL_HF_HOME},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    fatal = sorted(FILL_EXIT_CODES[c] for c in FILL_FATAL_CAUSES)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": serving.namespace,
            "labels": labels,
            "annotations": {
                ANNOTATION_MODEL: spec.model.name,
                ANNOTATION_REVISION: spec.model.revision or "",
                ANNOTATION_CLAIM: cache.claim_name,
            },
            "ownerReferences": [owner_reference(serving)],
        },
        "spec": {
            "backoffLimit": FILL_BACKOFF_LIMIT,
            "podFailurePolicy": {
                "rules": [
                    # A bad token, gated repo, wrong revision, full volume or bad checksum does
                    # not get better by retrying: the Job fails at once, with that exit code.
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": FILL_CONTAINER,
                            "operator": "In",
                            "values": fatal,
                        },
                    },
                    # A pod evicted or preempted is not the fill's fault: its retry is free.
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                ]
            },
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": FILL_USER,
                        "runAsGroup": FILL_USER,
                        "fsGroup": FILL_USER,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                    "volumes": [
                        {
                            "name": "weights",
                            "persistentVolumeClaim": {"claimName": cache.claim_name},
                        },
                        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
                    ],
                },
            },
        },
    }


@dataclass(frozen=True)
class FillPod:
    """What the controller keeps of the fill Job's newest pod."""

    name: str
    phase: str
    exit_code: int | None = None  # the fill container's terminated.exitCode
    message: str = ""  # its terminated.message (the command's one line)
    log_tail: str = ""  # the last LOG_TAIL_LINES lines of its log (running pods only)


@dataclass(frozen=True)
class FillObserved:
    """What the cluster shows of one serving's fill, gathered by the controller."""

    claim_found: bool
    claim_request: str | None = None  # the claim's spec.resources.requests.storage
    job: Mapping[str, Any] | None = None  # the fill Job, as read
    pod: FillPod | None = None  # its newest pod
    failed_pod: FillPod | None = None  # its newest pod that ended with a known cause


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
    return int(facts.checkpoint_gib * _GIB)


def last_report(log_tail: str) -> Mapping[str, Any] | None:
    """The last ``plan``, ``progress`` or ``done`` line of the fill's log (None: none yet)."""
    for line in reversed(log_tail.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") in ("plan", "progress", "done"):
            return event
    return None


def _seconds(text: str) -> int | None:
    """Seconds since the epoch of an RFC 3339 ``YYYY-MM-DDTHH:MM:SSZ`` (None: not one)."""
    m = re.fullmatch(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)Z", text)
    if m is None:
        return None
    return calendar.timegm((*(int(g) for g in m.groups()), 0, 0, 0))


def _eta(done: int, total: int, now: str, previous: S.WeightsStatus | None, job: str) -> int | None:
    """Seconds left at the rate since the previous report of the same Job (None: no rate)."""
    if previous is None or previous.job != job or done <= previous.bytes_done or total <= done:
        return None
    then, at = _seconds(previous.observed_at), _seconds(now)
    if then is None or at is None or at <= then:
        return None
    rate = (done - previous.bytes_done) / (at - then)
    return int((total - done) / rate + 0.5)


def _duration(seconds: int) -> str:
    if seconds < 90:
        return f"{seconds}s"
    if seconds < 5400:
        return f"{round(seconds / 60)}m"
    return f"{seconds / 3600:.1f}h"


def progress_line(status: S.WeightsStatus) -> str:
    """``12.5/476.0 GiB, 3/97 files, ETA 41m``: the printer column."""
    text = (
        f"{status.bytes_done / _GIB:.1f}/{status.bytes_total / _GIB:.1f} GiB, "
        f"{status.files_done}/{status.files_total} files"
    )
    if status.eta_seconds is not None:
        text += f", ETA {_duration(status.eta_seconds)}"
    return text


def _job_condition(job: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype and cond.get("status") == "True":
            return cond  # type: ignore[no-any-return]
    return None


def _failure_line(job_name: str, job: Mapping[str, Any], pod: FillPod | None) -> str:
    """The one line of a failed fill: the cause the exit code names and the command's message."""
    if pod is not None and pod.exit_code is not None:
        cause = _CAUSE_OF_CODE.get(pod.exit_code, "failed")
        said = " ".join(pod.message.split())
        # The command's own line starts with its cause; a kubelet fallback (log tail) may not.
        if said.startswith(f"{cause}: "):
            said = said[len(cause) + 2 :]
        detail = f": {said}" if said else ""
        return (
            f"fill Job {job_name} failed with exit code {pod.exit_code} ({cause}){detail}"
            f"; fix the cause, then delete the Job to fill again"
        )
    cond = _job_condition(job, "Failed") or {}
    reason = cond.get("reason") or "Failed"
    message = " ".join(str(cond.get("message") or "").split())
    return (
        f"fill Job {job_name} failed ({reason}{': ' + message if message else ''})"
        "; delete the Job to fill again"
    )


def _running_status(
    job_name: str, report: Mapping[str, Any] | None, base: S.WeightsStatus | None, now: str
) -> S.WeightsStatus:
    """The progress of a running fill from its last report and the last status of the same Job.

    No report (the pod starting, its log out of reach) or the same figures as last time: the
    last status as it was, so nothing is written and the next rate is measured from the read
    that saw these figures first."""
    if report is None:
        return base or S.WeightsStatus(job=job_name, observed_at=now, progress="starting")
    total = int(report.get("bytesTotal") or 0)
    done = total if report.get("event") == "done" else int(report.get("bytesDone") or 0)
    files = int(report.get("filesDone") or 0)
    if base is not None and (done, files, total) == (
        base.bytes_done,
        base.files_done,
        base.bytes_total,
    ):
        return base
    status = S.WeightsStatus(
        job=job_name,
        bytes_done=done,
        bytes_total=total,
        files_done=files,
        files_total=int(report.get("filesTotal") or 0),
        eta_seconds=_eta(done, total, now, base, job_name),
        observed_at=now,
    )
    return status.model_copy(update={"progress": progress_line(status)})


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
            f"({requested / _GIB:.1f} GiB) but {spec.model.name} needs about "
            f"{needed / _GIB:.1f} GiB: give the claim at least {needed / _GIB:.0f}Gi",
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
    if _job_condition(job, "Complete") is not None:
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
    if _job_condition(job, "Failed") is not None:
        line = _failure_line(job_name, job, observed.failed_pod or observed.pod)
        return WeightsState(
            False,
            REASON_WEIGHTS_FAILED,
            line,
            S.WeightsStatus(job=job_name, observed_at=now, progress="failed"),
        )
    report = last_report(observed.pod.log_tail) if observed.pod else None
    base = previous if previous is not None and previous.job == job_name else None
    status = _running_status(job_name, report, base, now)
    failed_before = observed.failed_pod
    if failed_before is not None and failed_before.exit_code is not None:
        cause = _CAUSE_OF_CODE.get(failed_before.exit_code, "failed")
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
