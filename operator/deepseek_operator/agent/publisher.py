"""Publish the agent's labels and annotation on its own Node, touching nothing else.

Rules (docs/design.md, docs/node-facts.md): patch only the Node named at construction; only keys
under :data:`~deepseek_operator.names.AGENT_PREFIX`; remove keys under that prefix that
are no longer wanted (whoever set them, the prefix is ours); send nothing when the Node already
carries exactly the wanted values, so Node watchers (the operator) are not woken for nothing.
The patch is a JSON merge patch holding only our keys (``null`` deletes), so labels set by
others can never be lost to a stale read. Transient API failures (unreachable server, 5xx, 429)
are retried with capped exponential backoff; anything else (403 from the admission policy, 404
for a wrong node name) is raised as :class:`PublishError` at once.

:func:`plan_patch` is the pure part and is unit-tested on its own.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from deepseek_operator.errors import DeepSeekOperatorError
from deepseek_operator.names import AGENT_FIELD_MANAGER, AGENT_PREFIX

log = logging.getLogger("deepseek_operator.agent")

MERGE_PATCH = "application/merge-patch+json"
REQUEST_TIMEOUT_S = 15.0
_TRANSIENT_STATUS = frozenset({0, 408, 429, 500, 502, 503, 504})


class PublishError(DeepSeekOperatorError):
    """Publishing failed for a reason retrying right away will not fix, or retries ran out."""


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff: ``initial × factor^n`` seconds, capped, with ±``jitter`` spread."""

    initial: float = 1.0
    factor: float = 2.0
    cap: float = 60.0
    jitter: float = 0.1

    def delays(self, rng: Callable[[], float] = random.random) -> Iterator[float]:
        """Yield the successive delays forever (the cap bounds each, not the count)."""
        delay = self.initial
        while True:
            spread = 1.0 + self.jitter * (2.0 * rng() - 1.0)
            yield min(self.cap, delay) * spread
            delay = min(self.cap, delay * self.factor)


@dataclass(frozen=True)
class PublishResult:
    """What :meth:`NodePublisher.publish` did: ``patch`` is None when nothing changed."""

    patch: dict[str, Any] | None
    attempts: int

    @property
    def changed(self) -> bool:
        """Whether a patch was sent."""
        return self.patch is not None


def _ours(values: Mapping[str, str] | None, prefix: str) -> dict[str, str]:
    return {k: v for k, v in (values or {}).items() if k.startswith(prefix)}


def _diff(current: Mapping[str, str], desired: Mapping[str, str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {k: v for k, v in desired.items() if current.get(k) != v}
    out.update({k: None for k in current if k not in desired})
    return dict(sorted(out.items()))


def plan_patch(
    current_labels: Mapping[str, str] | None,
    current_annotations: Mapping[str, str] | None,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    prefix: str = AGENT_PREFIX,
) -> dict[str, Any] | None:
    """The merge patch turning the Node's ``prefix`` keys into the wanted ones, or None.

    Only keys under ``prefix`` appear in the patch; the Node's other keys are ignored, so they
    can never be changed. Raises ValueError if a wanted key is outside ``prefix``.
    """
    for key in (*labels, *annotations):
        if not key.startswith(prefix):
            raise ValueError(f"key {key!r} is outside the agent's prefix {prefix!r}")
    metadata: dict[str, Any] = {}
    label_patch = _diff(_ours(current_labels, prefix), labels)
    if label_patch:
        metadata["labels"] = label_patch
    annotation_patch = _diff(_ours(current_annotations, prefix), annotations)
    if annotation_patch:
        metadata["annotations"] = annotation_patch
    return {"metadata": metadata} if metadata else None


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is worth retrying: the server is unreachable, overloaded or failing."""
    import urllib3.exceptions
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        # Status 0: the client could not even build a response (TLS failure, reset).
        return exc.status in _TRANSIENT_STATUS
    return isinstance(exc, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError))


class NodePublisher:
    """Writes our labels and annotation to one Node through a ``CoreV1Api``-like client."""

    def __init__(
        self,
        core_api: Any,
        node_name: str,
        *,
        backoff: Backoff | None = None,
        max_attempts: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
        prefix: str = AGENT_PREFIX,
        field_manager: str = AGENT_FIELD_MANAGER,
    ) -> None:
        if not node_name:
            raise ValueError("the node name must not be empty")
        self._core = core_api
        self.node_name = node_name
        self._backoff = backoff or Backoff()
        self._max_attempts = max_attempts
        self._sleep = sleep
        self._prefix = prefix
        self._field_manager = field_manager

    def publish(self, labels: Mapping[str, str], annotations: Mapping[str, str]) -> PublishResult:
        """Make the Node's ``prefix`` keys equal to ``labels``/``annotations``; retry if down.

        Raises PublishError on a permanent failure or when ``max_attempts`` runs out.
        """
        delays = self._backoff.delays()
        attempt = 0
        while True:
            attempt += 1
            try:
                patch = self._publish_once(labels, annotations)
                return PublishResult(patch=patch, attempts=attempt)
            except ValueError:
                raise
            except Exception as exc:
                reason = _describe(exc)
                if not is_transient(exc):
                    raise PublishError(
                        f"cannot publish on Node {self.node_name}: {reason}"
                    ) from exc
                if self._max_attempts is not None and attempt >= self._max_attempts:
                    raise PublishError(
                        f"gave up publishing on Node {self.node_name} after {attempt} "
                        f"attempts: {reason}"
                    ) from exc
                delay = next(delays)
                log.warning(
                    "API server unreachable, retrying",
                    extra={
                        "node": self.node_name,
                        "attempt": attempt,
                        "retry_in_s": round(delay, 2),
                        "error": reason,
                    },
                )
                self._sleep(delay)

    def _publish_once(
        self, labels: Mapping[str, str], annotations: Mapping[str, str]
    ) -> dict[str, Any] | None:
        node = self._core.read_node(self.node_name, _request_timeout=REQUEST_TIMEOUT_S)
        meta = node.metadata
        patch = plan_patch(meta.labels, meta.annotations, labels, annotations, self._prefix)
        if patch is None:
            return None
        self._core.patch_node(
            self.node_name,
            patch,
            field_manager=self._field_manager,
            _content_type=MERGE_PATCH,
            _request_timeout=REQUEST_TIMEOUT_S,
        )
        return patch


def _describe(exc: BaseException) -> str:
    """A one-line reason: the API status and message, not the whole HTTP response dump."""
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status:
        body = getattr(exc, "body", None)
        message = None
        if body:
            try:
                message = json.loads(body).get("message")
            except (ValueError, AttributeError):
                message = None
        return f"HTTP {status} {getattr(exc, 'reason', '')}".strip() + (
            f": {message}" if message else ""
        )
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
