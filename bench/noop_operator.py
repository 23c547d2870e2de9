"""The baseline of ``bench/bench_operator.py``: the minimal kopf operator doing one status write.

On create and resume of a DeepSeekServing it merge-patches ``status`` with a
``BackendResolved``-like condition (``observedGeneration`` = ``metadata.generation``), decides
nothing and creates nothing. kopf keeps its bookkeeping in annotations as the real operator
does (the structural schema prunes unknown ``status`` fields); everything else is kopf's
defaults (no worker limit), which is what "a minimal kopf operator" means.

Run: ``python -m kopf run --standalone -A --quiet bench/noop_operator.py``.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import kopf

GROUP, VERSION, PLURAL = "serving.deepseek-operator.io", "v1alpha1", "deepseekservings"
ANNOTATION_PREFIX = "serving.deepseek-operator.io"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Keep kopf's progress and diff base in annotations, as the real operator does."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration", ignored_fields=["status"]
    )
    settings.posting.level = logging.WARNING


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
