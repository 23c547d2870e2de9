"""The ONE DeepSeekServing builder for tests against an API server: an example from
``examples/``, made small enough for fake Nodes and pinned to a test's own pool.

Every control-plane test used to copy the same five lines (deep-copy the example, name it, drop
its tolerations, ask for 1 CPU and 1 GiB, select the Nodes labelled ``pool=<namespace>``); they
differed only in the example, the name and the pool.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
GB200 = "dsv41-flash-gb200.yaml"  # one pod, TP4 on one GB200 tray
DEP8_NVL72 = "dsv41-flash-dep8-nvl72.yaml"  # a LeaderWorkerSet group of two trays in a rack
PD_GB200 = "dsv41-flash-1p1d-gb200.yaml"  # a prefill / decode pair
SMALL_REQUESTS = {"requests": {"cpu": "1", "memory": "1Gi"}}


@functools.cache
def _example(file: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "examples" / file).read_text())
    return loaded


def serving(
    namespace: str,
    name: str = "dsv41",
    *,
    example: str = GB200,
    pool: str | None = "",
    small: bool = True,
    **spec: Any,
) -> dict[str, Any]:
    """``example`` as ``namespace/name``, without its tolerations; ``pool``: the Nodes labelled
    ``pool=<pool>`` only ("": the namespace's pool, None: the example's own selector);
    ``small``: 1 CPU and 1 GiB per pod (each role's, for a pair); ``spec``: fields to set."""
    doc = copy.deepcopy(_example(example))
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"].pop("tolerations", None)
    if small:
        roles = (doc["spec"].get("disaggregation") or {}).get("roles")
        for part in roles or [doc["spec"]]:
            part["resources"] = copy.deepcopy(SMALL_REQUESTS)
    if pool is not None:
        doc["spec"]["nodeSelector"] = {"pool": pool or namespace}
    doc["spec"].update(spec)
    return doc
