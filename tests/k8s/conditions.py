"""A DeepSeekServing's status conditions, read and waited for, in the cluster tests.

One home for what every e2e and integration file used to define for itself: :func:`condition`
(one condition of a body, ``{}`` when absent), :func:`get_serving` / :func:`serving_condition`
(the live object through kubectl) and :func:`wait_condition` (poll until a condition has a
status and/or reason, return the object).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from deepseek_operator import names
from tests.k8s.cluster import ControlPlane, wait_for

SERVING = "dsv41"
"""The name most tests give their one DeepSeekServing (the example's)."""


def condition(obj: Mapping[str, Any], ctype: str) -> dict[str, Any]:
    """The condition of type *ctype* in ``obj.status.conditions``; ``{}`` when there is none."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return dict(next((c for c in conditions if c["type"] == ctype), {}))


def get_serving(cp: ControlPlane, namespace: str, name: str = SERVING) -> dict[str, Any]:
    """The live DeepSeekServing *namespace*/*name* (kubectl, admin)."""
    return dict(cp.kubectl_json("get", names.PLURAL, name, "-n", namespace))


def serving_condition(
    cp: ControlPlane, namespace: str, ctype: str, name: str = SERVING
) -> dict[str, Any]:
    """The condition *ctype* of the live DeepSeekServing; ``{}`` when it has none yet."""
    return condition(get_serving(cp, namespace, name), ctype)


def wait_condition(
    cp: ControlPlane,
    namespace: str,
    ctype: str,
    status: str | None = None,
    *,
    reason: str | None = None,
    name: str = SERVING,
    check: Callable[[dict[str, Any]], bool] | None = None,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Poll the DeepSeekServing until its condition *ctype* has *status* and *reason* (each
    when given) and *check* (when given) holds for the object; return the object.

    On timeout the ``AssertionError`` of :func:`~tests.k8s.cluster.wait_for` names the
    condition wanted and the one last seen.
    """
    last: dict[str, Any] = {}

    def ok() -> dict[str, Any] | None:
        obj = get_serving(cp, namespace, name)
        cond = last["cond"] = condition(obj, ctype)
        if status is not None and cond.get("status") != status:
            return None
        if reason is not None and cond.get("reason") != reason:
            return None
        return obj if check is None or check(obj) else None

    wanted = ctype + (f"={status}" if status else "") + (f" ({reason})" if reason else "")
    try:
        return wait_for(ok, timeout=timeout, what=f"{wanted} on {namespace}/{name}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen: {last.get('cond')}") from None
