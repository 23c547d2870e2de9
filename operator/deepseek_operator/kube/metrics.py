"""Prometheus metrics of the operator's Kubernetes requests (the rest are in
:mod:`deepseek_operator.controller.metrics`; both are served on ``--metrics-port``)."""

from __future__ import annotations

from prometheus_client import Counter

API_REQUESTS = Counter(
    "deepseek_operator_api_requests_total",
    "Kubernetes API requests issued by the reconciler (kopf's own watch and bookkeeping excluded)",
    ["verb"],
)
WATCH_LISTS = Counter(
    "deepseek_operator_watch_lists_total",
    "Full LISTs of a watched kind: one at start and one per expired resourceVersion (410)",
    ["kind"],
)
THROTTLED = Counter(
    "deepseek_operator_throttled_total",
    "Requests the API server answered 429 Too Many Requests (waited as Retry-After says)",
    ["verb"],
)
