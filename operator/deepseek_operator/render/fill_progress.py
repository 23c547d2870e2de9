"""Reading a fill back, pure: the facts the controller gathers of the fill Job and its pod, and
the progress, ETA and failure line they make.

What the operator reads needs no API rights in the fill pod: the Job's conditions, the pod's
terminated state (exit code: the cause, :data:`~deepseek_operator.names.FILL_EXIT_CODES`; its
message: the one line the command writes to its termination log) and the last JSON lines of its
log (``pods/log`` with ``tailLines``).
"""

from __future__ import annotations

import calendar
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deepseek_operator.api import status as S
from deepseek_operator.catalog.gpu_memory import GIB
from deepseek_operator.names import FILL_CONTAINER, FILL_EXIT_CODES

LOG_TAIL_LINES = 20
"""Log lines the controller reads from a running fill pod (the last progress line is among them:
the command writes nothing else between two of them but the client's rare warnings)."""
_CAUSE_OF_CODE = {code: cause for cause, code in FILL_EXIT_CODES.items()}


@dataclass(frozen=True)
class FillPod:
    """What the controller keeps of the fill Job's newest pod."""

    name: str
    phase: str
    exit_code: int | None = None  # the fill container's terminated.exitCode
    message: str = ""  # its terminated.message (the command's one line)
    log_tail: str = ""  # the last LOG_TAIL_LINES lines of its log (running pods only)


def fill_pod(pod: Mapping[str, Any]) -> FillPod:
    """What the controller keeps of a fill pod: its name, phase and the fill container's
    terminated exit code and message."""
    status = pod.get("status") or {}
    exit_code: int | None = None
    message = ""
    for container in status.get("containerStatuses") or []:
        if container.get("name") != FILL_CONTAINER:
            continue
        terminated = (container.get("state") or {}).get("terminated") or {}
        if "exitCode" in terminated:
            exit_code = int(terminated["exitCode"])
            message = str(terminated.get("message") or "")
    return FillPod(
        name=str((pod.get("metadata") or {}).get("name") or ""),
        phase=str(status.get("phase") or ""),
        exit_code=exit_code,
        message=message,
    )


@dataclass(frozen=True)
class FillObserved:
    """What the cluster shows of one serving's fill, gathered by the controller."""

    claim_found: bool
    claim_request: str | None = None  # the claim's spec.resources.requests.storage
    job: Mapping[str, Any] | None = None  # the fill Job, as read
    pod: FillPod | None = None  # its newest pod
    failed_pod: FillPod | None = None  # its newest pod that ended with a known cause


def exit_cause(exit_code: int) -> str:
    """The cause a fill pod's exit code names (``failed`` for a code the command never uses)."""
    return _CAUSE_OF_CODE.get(exit_code, "failed")


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
        f"{status.bytes_done / GIB:.1f}/{status.bytes_total / GIB:.1f} GiB, "
        f"{status.files_done}/{status.files_total} files"
    )
    if status.eta_seconds is not None:
        text += f", ETA {_duration(status.eta_seconds)}"
    return text


def job_condition(job: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    """The Job's condition ``ctype`` when it is True (None: absent or not True)."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype and cond.get("status") == "True":
            return cond  # type: ignore[no-any-return]
    return None


def failure_line(job_name: str, job: Mapping[str, Any], pod: FillPod | None) -> str:
    """The one line of a failed fill: the cause the exit code names and the command's message."""
    if pod is not None and pod.exit_code is not None:
        cause = exit_cause(pod.exit_code)
        said = " ".join(pod.message.split())
        # The command's own line starts with its cause; a kubelet fallback (log tail) may not.
        if said.startswith(f"{cause}: "):
            said = said[len(cause) + 2 :]
        detail = f": {said}" if said else ""
        return (
            f"fill Job {job_name} failed with exit code {pod.exit_code} ({cause}){detail}"
            f"; fix the cause, then delete the Job to fill again"
        )
    cond = job_condition(job, "Failed") or {}
    reason = cond.get("reason") or "Failed"
    message = " ".join(str(cond.get("message") or "").split())
    return (
        f"fill Job {job_name} failed ({reason}{': ' + message if message else ''})"
        "; delete the Job to fill again"
    )


def running_status(
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
