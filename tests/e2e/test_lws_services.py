"""LeaderWorkerSet's headless Service and ours, side by side, with the real LWS controller.

LWS creates the headless Service ``<lws-name>`` only if no Service of that name exists, and the
workers find their leader (``LWS_LEADER_ADDRESS``) only through it; the operator's Service is
``<name>-api``. Checked in both creation orders (the operator's objects first; LWS's Service
already there when the operator writes ours, after a restart), and with a Service of ours'
name that someone else made beforehand: ``WorkloadApplied=False`` (``ForeignObjectInTheWay``),
no retry loop in the operator's log, ours created once that object is deleted.
"""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.k8s.cluster import ControlPlane, unique_name, wait_for
from tests.k8s.conditions import condition, serving_condition, wait_condition
from tests.k8s.dra import ComputeDomainDriver
from tests.k8s.operator import OperatorProcess
from tests.racks import two_racks
from tests.servings import DEP8_NVL72, serving

pytestmark = pytest.mark.e2e

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((REPO / "examples/dsv41-flash-dep8-nvl72.yaml").read_text())
NAME = EXAMPLE["metadata"]["name"]
OURS = f"{NAME}-api"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
# How long the operator's log is watched for a retry loop while a foreign object is in the way.
OBSERVE_S = 20


@pytest.fixture
def racks(
    lws_cluster: ControlPlane,
    compute_domain_driver: ComputeDomainDriver,
    namespace: str,
    node_factory: Callable[..., list[Any]],
) -> list[Any]:
    """This test's trays (pool=<namespace>), with the driver's ResourceSlices published."""
    nodes = two_racks(unique_name("svc"))
    for node in nodes:
        node["metadata"]["labels"]["pool"] = namespace
    created = node_factory(*nodes)
    compute_domain_driver.publish(created)
    return created


def _get(cp: ControlPlane, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
    found = cp.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
    return json.loads(found.stdout) if found.returncode == 0 else None


def _running_pods(cp: ControlPlane, namespace: str) -> list[dict[str, Any]] | None:
    pods = cp.kubectl_json("get", "pods", "-n", namespace, "-l", f"{LWS_NAME_LABEL}={NAME}")[
        "items"
    ]
    running = [p for p in pods if p["status"].get("phase") == "Running"]
    return running if len(running) == 2 else None


def _controller(obj: dict[str, Any]) -> tuple[str, str, str] | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return (ref["kind"], ref["name"], ref["uid"])
    return None


def _selects(service: dict[str, Any], pod: dict[str, Any]) -> bool:
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in service["spec"]["selector"].items())


def _check_both_services(cp: ControlPlane, namespace: str) -> tuple[str, str]:
    """LWS's headless Service selects every pod of the group, ours (ClusterIP) the leader; the
    uids of (LWS's, ours)."""
    pods = wait_for(lambda: _running_pods(cp, namespace), timeout=180, what="one group of 2 pods")
    dss = cp.kubectl_json("get", "dss", NAME, "-n", namespace)
    lws = cp.kubectl_json("get", "leaderworkerset", NAME, "-n", namespace)
    headless = wait_for(lambda: _get(cp, "service", NAME, namespace), timeout=60, what="LWS svc")
    assert headless["spec"]["clusterIP"] == "None", headless["spec"]
    assert _controller(headless) == ("LeaderWorkerSet", NAME, lws["metadata"]["uid"])
    assert headless["spec"]["selector"] == {LWS_NAME_LABEL: NAME}
    assert all(_selects(headless, p) for p in pods), [p["metadata"]["labels"] for p in pods]
    # The workers' way to their leader: <leader-pod>.<lws-name>.<namespace>.
    worker = next(p for p in pods if p["metadata"]["labels"].get(WORKER_INDEX_LABEL) == "1")
    env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}
    assert env["LWS_LEADER_ADDRESS"].startswith(f"{NAME}-0.{NAME}.{namespace}")

    ours = wait_for(lambda: _get(cp, "service", OURS, namespace), timeout=60, what="our svc")
    assert ours["spec"]["clusterIP"] not in ("None", "", None)
    assert _controller(ours) == ("DeepSeekServing", NAME, dss["metadata"]["uid"])
    selected = sorted(p["metadata"]["name"] for p in pods if _selects(ours, p))
    assert selected == [f"{NAME}-0"]  # the leader runs vLLM's API server
    assert serving_condition(cp, namespace, "WorkloadApplied", NAME).get("status") != "False"
    return headless["metadata"]["uid"], ours["metadata"]["uid"]


def test_the_operator_first_then_lws_each_service_is_its_owners(
    lws_cluster: ControlPlane, operator: OperatorProcess, namespace: str, racks: list[Any]
) -> None:
    lws_cluster.apply(serving(namespace, NAME, example=DEP8_NVL72, replicas=1))
    _check_both_services(lws_cluster, namespace)


def test_lws_service_already_there_when_the_operator_writes_ours(
    lws_cluster: ControlPlane,
    operator: OperatorProcess,
    namespace: str,
    racks: list[Any],
    tmp_path: pathlib.Path,
) -> None:
    cp = lws_cluster
    cp.apply(serving(namespace, NAME, example=DEP8_NVL72, replicas=1))
    headless_uid, deleted_uid = _check_both_services(cp, namespace)
    operator.stop(kill=True)
    try:
        # The operator is down; LWS's Service stays, ours is gone: the next operator writes
        # ours beside a headless Service it did not make.
        cp.kubectl("delete", "service", OURS, "-n", namespace)
        restarted = OperatorProcess(cp, tmp_path).start()
        try:
            again, ours_uid = _check_both_services(cp, namespace)
            assert again == headless_uid  # LWS's Service untouched
            assert ours_uid != deleted_uid  # ours made anew
            assert "Traceback" not in restarted.log_path.read_text(errors="replace")
        finally:
            restarted.stop()
    finally:
        operator.start()


def _records(op: OperatorProcess) -> list[dict[str, Any]]:
    """The operator's log lines (JSON), others' namespaces included (filtered by the caller:
    kopf's own lines name the namespace only in their text)."""
    out = []
    for line in op.log_path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append({"level": "TEXT", "msg": line})
    return out


def test_a_service_of_ours_name_made_by_someone_else_is_reported_not_fought_over(
    lws_cluster: ControlPlane, operator: OperatorProcess, namespace: str, racks: list[Any]
) -> None:
    cp = lws_cluster
    squatter = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": OURS, "namespace": namespace, "labels": {"team": "other"}},
        "spec": {"selector": {"app": "other"}, "ports": [{"port": 9999}]},
    }
    cp.apply(squatter)
    before = cp.kubectl_json("get", "service", OURS, "-n", namespace)
    cp.apply(serving(namespace, NAME, example=DEP8_NVL72, replicas=1))

    obj = wait_condition(cp, namespace, "WorkloadApplied", "False", name=NAME)
    applied = condition(obj, "WorkloadApplied")
    assert applied["reason"] == "ForeignObjectInTheWay"
    assert applied["message"].startswith(f"Service/{OURS} already exists and has no owner")
    ready = serving_condition(cp, namespace, "Ready", NAME)
    assert ready["status"] == "False" and ready["reason"] == "ForeignObjectInTheWay"
    events = cp.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", "reason=ForeignObjectInTheWay"
    )["items"]
    assert len(events) == 1 and events[0]["type"] == "Warning", events
    assert f"Service/{OURS}" in events[0]["message"] and events[0].get("count", 1) == 1
    # The rest of the workload is written: LWS runs the group beside the squatter.
    wait_for(lambda: _running_pods(cp, namespace), timeout=180, what="one group of 2 pods")
    # ...and ready, as far as LeaderWorkerSet's status goes: on a loaded machine the pods' and
    # the group's status changes (each a reconcile, rightly) otherwise land in the window below.
    wait_for(
        lambda: (
            cp.kubectl_json("get", "leaderworkerset", NAME, "-n", namespace)
            .get("status", {})
            .get("readyReplicas")
            == 1
        ),
        timeout=120,
        what="the LeaderWorkerSet's group ready",
    )

    # No retry loop: over OBSERVE_S seconds at most two back-off steps (10 s, 20 s, ...) and a
    # late LeaderWorkerSet status event, no error line, and the squatter exactly as it was (not
    # adopted, not written over).
    start = len(_records(operator))
    time.sleep(OBSERVE_S)
    window = [r for r in _records(operator)[start:] if namespace in json.dumps(r)]
    errors = [r for r in window if r.get("level") in ("ERROR", "CRITICAL", "TEXT")]
    retries = [r for r in window if r.get("foreign")]
    assert errors == [], errors
    assert len(retries) <= 3, [
        (r.get("ts"), r.get("trigger"), r.get("retry_after")) for r in retries
    ]
    after = cp.kubectl_json("get", "service", OURS, "-n", namespace)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert "ownerReferences" not in after["metadata"]
    assert len(cp.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", "reason=ForeignObjectInTheWay"
    )["items"]) == 1  # fmt: skip

    # Gone: the next back-off step (at most 5 minutes; here, after some 30-90 s blocked, the
    # 40 s or 80 s one) creates ours.
    cp.kubectl("delete", "service", OURS, "-n", namespace)
    wait_condition(cp, namespace, "WorkloadApplied", "True", name=NAME, timeout=150)
    _check_both_services(cp, namespace)
