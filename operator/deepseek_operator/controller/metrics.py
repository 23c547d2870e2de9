"""Prometheus metrics of the operator (served on ``--metrics-port``; those of its Kubernetes
requests are in :mod:`deepseek_operator.kube.metrics`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter(
    "deepseek_operator_reconciles_total",
    "Reconciles of DeepSeekServings, by trigger and result",
    ["trigger", "result"],
)
ERRORS = Counter("deepseek_operator_reconcile_errors_total", "Reconciles that raised", ["error"])
DECISIONS = Counter(
    "deepseek_operator_decisions_total",
    "Backend decisions made or changed, by rendered backend and reason",
    ["backend", "reason"],
)
RECONCILE_SECONDS = Histogram(
    "deepseek_operator_reconcile_duration_seconds",
    "Wall time of one reconcile",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
APPLIES = Counter(
    "deepseek_operator_child_applies_total", "Server-side applies of child objects", ["kind"]
)
NODES = Gauge("deepseek_operator_nodes", "Nodes in the operator's index")
REMEMBERED = Gauge(
    "deepseek_operator_remembered_entries",
    "Per-object entries the operator holds, by place (all 0 once every DeepSeekServing and its"
    " children are gone)",
    ["place"],
)
