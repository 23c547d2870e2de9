"""The baseline of ``bench/bench_operator.py``: the minimal kopf operator doing one status write.

On create and resume of a DeepSeekServing it merge-patches ``status`` with a
``BackendResolved``-like condition (``observedGeneration`` = ``metadata.generation``), decides
nothing and creates nothing. Like the real operator it keeps an index of every Node (name → labels,
from a kopf ``on.event`` handler; kopf's own ``@kopf.index`` would make its start-up quadratic in
Nodes, see ``deepseek_operator/kube/list_watch.py``) and exports how many Nodes it holds as
the gauge ``deepseek_operator_nodes`` on ``$NOOP_METRICS_PORT`` (as the real operator does), which
is how the benchmark times its start-up. kopf keeps its bookkeeping in annotations (the
structural schema prunes unknown ``status`` fields), as earlier versions of the real operator
did (it now uses an event handler and writes no kopf bookkeeping); everything else is kopf's
defaults (no worker limit), which is what "a minimal kopf operator" means.

Run: ``NOOP_METRICS_PORT=9090 python -m kopf run --standalone -A --quiet bench/noop_operator.py``.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from typing import Any

import kopf
from prometheus_client import Gauge, start_http_server

from deepseek_operator import names

GROUP, VERSION, PLURAL = names.GROUP, names.VERSION, names.PLURAL
ANNOTATION_PREFIX = names.KOPF_ANNOTATION_PREFIX

NODE_LABELS: dict[str, dict[str, str]] = {}
NODES = Gauge("deepseek_operator_nodes", "Nodes in the no-op operator's index")


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Keep kopf's progress and diff base in annotations (a create handler needs them)."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration", ignored_fields=["status"]
    )
    settings.posting.level = logging.WARNING
    start_http_server(int(os.environ.get("NOOP_METRICS_PORT", "9090")), addr="127.0.0.1")


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
async def resolved(meta: kopf.Meta, patch: kopf.Patch, **_: Any) -> None:
    """Write a ``BackendResolved=True`` condition for the current generation (one status PATCH)."""
    generation = meta.get("generation")
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch.status["observedGeneration"] = generation
    patch.status["conditions"] = [
        {
            "type": "BackendResolved",
            "status": "True",
            "reason": "NoOp",
            "message": "no-op baseline handler",
            "observedGeneration": generation,
            "lastTransitionTime": now,
        }
    ]


@kopf.on.event("", "v1", "nodes")
async def node_seen(name: str, type: str, labels: kopf.Labels, **_: Any) -> None:
    """Keep every Node's labels (the cheapest node index a kopf operator can keep)."""
    if type == "DELETED":
        NODE_LABELS.pop(name, None)
    else:
        NODE_LABELS[name] = dict(labels)
    NODES.set(len(NODE_LABELS))
