"""What the API server's answers to our writes mean: refusals, an owner gone, a name taken."""

from __future__ import annotations

import contextlib
import json

from deepseek_operator.actions import foreign_message
from deepseek_operator.errors import DeepSeekOperatorError


class ApiError(Exception):
    """The API server answered an HTTP error: its status, reason and body (a ``Status``)."""

    def __init__(self, status: int, reason: str, body: bytes | str | None = None) -> None:
        self.status = status
        self.reason = reason
        self.body = body
        super().__init__(f"({status}) Reason: {reason}")


class KubeError(DeepSeekOperatorError):
    """The API server does not serve a kind the operator needs to write."""


class OwnerGone(DeepSeekOperatorError):
    """The DeepSeekServing was deleted (or replaced by a new one of the same name)."""


class WriteRefused(DeepSeekOperatorError):
    """The API server refused a write (invalid, forbidden, conflicting): its own words."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(f"HTTP {status}: {message}")


class ForeignObject(DeepSeekOperatorError):
    """A child's name is taken by an object this DeepSeekServing does not control."""

    def __init__(self, kind: str, name: str, owner: str) -> None:
        self.kind = kind
        self.name = name
        self.owner = owner  # "LeaderWorkerSet/x", "DeepSeekServing/x (uid ...)" or "no owner"
        self.message = foreign_message(kind, name, owner)
        super().__init__(self.message)


# HTTP answers that mean "not now" rather than "not this": too many requests, unavailable,
# timed out. They are retried as an outage is; every other error status is a refusal.
TRY_AGAIN_STATUSES = frozenset({429, 503, 504})


def refusal(exc: Exception) -> WriteRefused | None:
    """The API server's refusal in ``exc``, or None for a connection failure or a "try again".

    Any HTTP error answer is a refusal, 5xx included: the API server answers 500 "failed to
    create typed patch object" (a list-map with duplicate keys) or "failed to convert" for a
    body it will refuse every time, exactly like a 422.
    """
    status = getattr(exc, "status", None)
    if not isinstance(status, int) or status < 400 or status in TRY_AGAIN_STATUSES:
        return None
    body = getattr(exc, "body", None) or b"{}"
    message = str(getattr(exc, "reason", "") or "")
    with contextlib.suppress(TypeError, ValueError, AttributeError):
        message = str(json.loads(body).get("message") or message)
    return WriteRefused(status, message)


def retry_after(header: str | None, default: float) -> float:
    """The seconds a 429's ``Retry-After`` header asks for (a number; an HTTP date or nothing
    gives ``default``), at most :data:`RETRY_AFTER_MAX_S`."""
    try:
        seconds = float(header) if header else default
    except ValueError:
        seconds = default
    return min(max(seconds, 0.0), RETRY_AFTER_MAX_S)


# The longest wait a Retry-After may impose (API Priority and Fairness asks for 1 s).
RETRY_AFTER_MAX_S = 30.0
