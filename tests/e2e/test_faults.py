"""Faults: a failing API server must not turn deleted DeepSeekServings into zombies (issue 11).

The operator runs as its own process. Five DeepSeekServings are served on kwok GB200 nodes; one is
deleted just before kube-apiserver stops, the API server stays down for a few seconds, and two more
are deleted right after it comes back (their children are then garbage-collected, which the
operator sees as child events of an owner that no longer exists). For every deleted name the
operator's log must show no reconcile and no apply after its deletion, no traceback and no
"coroutine ... was never awaited"; the two survivors keep being served.
"""

from __future__ import annotations

import datetime as dt
import json
import pathlib
import time
from typing import Any

import pytest

from tests.gpu_nodes import gb200_tray
from tests.k8s.cluster import ControlPlane, wait_for
from tests.k8s.conditions import condition, wait_condition
from tests.k8s.operator import OperatorProcess, running_operator
from tests.servings import serving

pytestmark = pytest.mark.e2e

OUTAGE_S = 5
OBSERVE_S = 30
GRACE = dt.timedelta(seconds=2)


def records(op: OperatorProcess) -> list[dict[str, Any]]:
    out = []
    for line in op.log_path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append({"msg": line})
    return out


def _ts(record: dict[str, Any]) -> dt.datetime | None:
    try:
        return dt.datetime.strptime(str(record.get("ts")), "%Y-%m-%dT%H:%M:%S%z")
    except ValueError:
        return None


def restart_apiserver(cp: ControlPlane, down_for: float) -> None:
    """Stop kube-apiserver (SIGTERM), keep it down ``down_for`` seconds, start it again."""
    apiserver = next(c for c in cp.components if c.name == "kube-apiserver")
    apiserver.stop()
    time.sleep(down_for)
    apiserver.start()
    cp._wait_healthy(apiserver, timeout=120)


def delete(cp: ControlPlane, namespace: str, name: str) -> dt.datetime:
    cp.kubectl("delete", "dss", name, "-n", namespace, "--wait=false")
    return dt.datetime.now(dt.UTC)


def test_deleted_servings_around_an_apiserver_restart_are_never_reconciled_again(
    full_cluster: ControlPlane,
    crds: ControlPlane,
    namespace: str,
    node_factory: Any,
    tmp_path: pathlib.Path,
) -> None:
    cp = full_cluster
    pool = namespace
    node_factory(*[gb200_tray(f"{namespace[:50]}-gb{i}", pool) for i in range(5)])
    names = [f"z{i}" for i in range(5)]
    with running_operator(cp, tmp_path) as op:
        for name in names:
            cp.apply(serving(namespace, name, pool=pool))
        for name in names:
            wait_for(
                lambda n=name: (
                    cp.kubectl("get", "deployment", n, "-n", namespace, check=False).returncode == 0
                ),
                timeout=120,
                what=f"the Deployment of {name}",
            )

        deleted = {"z0": delete(cp, namespace, "z0")}
        restart_apiserver(cp, OUTAGE_S)
        for name in ("z1", "z2"):
            deleted[name] = delete(cp, namespace, name)
        time.sleep(OBSERVE_S)

        log = op.log_path.read_text(errors="replace")
        assert "Traceback" not in log, op.logs(200)
        assert "was never awaited" not in log, op.logs(200)
        late: dict[str, list[str]] = {name: [] for name in deleted}
        for record in records(op):
            name = record.get("name_") or record.get("name")
            when = _ts(record)
            # A reconcile already running when the delete landed may still finish (2 s).
            acted = record.get("msg") == "Reconciled DeepSeekServing" or record.get("applied")
            if name in deleted and when is not None and when > deleted[name] + GRACE and acted:
                late[name].append(json.dumps(record))
        assert all(not v for v in late.values()), "zombie reconciles:\n" + "\n".join(
            line for v in late.values() for line in v[:5]
        )
        # The deleted ones stay gone (no child re-created), the survivors stay served.
        for name in deleted:
            assert cp.kubectl("get", "dss", name, "-n", namespace, check=False).returncode != 0
            wait_for(
                lambda n=name: (
                    cp.kubectl("get", "deployment", n, "-n", namespace, check=False).returncode != 0
                ),
                timeout=60,
                what=f"the Deployment of deleted {name} to stay gone",
            )
        for name in ("z3", "z4"):
            assert cp.kubectl("get", "deployment", name, "-n", namespace).returncode == 0


def _refusing_policy(namespace: str) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy (and its binding) refusing Deployments named ``refused`` in
    ``namespace``: a cluster's own policy, the refusal admission of the DeepSeekServing cannot
    foresee (every child the spec itself makes invalid is refused at admission now)."""
    name = f"refuse-{namespace}"
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["apps"],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["deployments"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": "object.metadata.name != 'refused'",
                        "message": "the cluster's policy refuses this Deployment",
                    }
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                },
            },
        },
    ]


def test_a_child_the_api_server_refuses_is_reported_and_retried_with_backoff(
    full_cluster: ControlPlane, crds: ControlPlane, namespace: str, tmp_path: pathlib.Path
) -> None:
    cp = full_cluster
    policy = _refusing_policy(namespace)
    cp.apply(policy)
    probe = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "refused", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": "probe"}},
            "template": {
                "metadata": {"labels": {"app": "probe"}},
                "spec": {"containers": [{"name": "c", "image": "probe"}]},
            },
        },
    }
    wait_for(
        lambda: (
            cp.kubectl("create", "--dry-run=server", "-f", "-", input=probe, check=False).returncode
            != 0
        ),
        timeout=30,
        what="the refusing policy in force",
    )
    op = OperatorProcess(cp, tmp_path).start()
    try:
        doc = serving(namespace, "refused")
        cp.apply(doc)

        obj = wait_condition(cp, namespace, "WorkloadApplied", "False", name="refused")
        applied = condition(obj, "WorkloadApplied")
        assert applied["reason"] == "WorkloadRefused"
        assert "Deployment/refused" in applied["message"], applied
        assert "the cluster's policy refuses this Deployment" in applied["message"], applied
        ready = condition(obj, "Ready")
        assert ready["status"] == "False" and ready["reason"] == "WorkloadRefused"
        events = cp.kubectl_json(
            "get", "events", "-n", namespace, "--field-selector", "reason=WorkloadRefused"
        )["items"]
        assert any("Deployment/refused" in e["message"] for e in events), events
        # Backoff: the retries come 10 s, 20 s, 40 s apart, not every few seconds. (A watch
        # event's reconcile in between, e.g. the Service's, keeps the step: next_failures.)
        time.sleep(35)
        delays = [
            r["retry_after"]
            for r in records(op)
            if r.get("name") == "refused"
            and r.get("retry_after") is not None
            and r.get("trigger") in ("create", "backoff")
        ]
        assert 2 <= len(delays) <= 4, delays
        assert delays == sorted(delays) and delays[1] == 2 * delays[0], delays
        assert "Traceback" not in op.log_path.read_text(errors="replace")

        # The policy lifted: the next retry applies, the condition flips, the retries stop.
        for obj_ in reversed(policy):
            cp.kubectl("delete", obj_["kind"].lower(), obj_["metadata"]["name"])

        # the policy gone: WorkloadApplied=True
        wait_condition(cp, namespace, "WorkloadApplied", "True", name="refused", timeout=120)
    finally:
        op.stop()
        for obj_ in reversed(policy):
            cp.kubectl(
                "delete", obj_["kind"].lower(), obj_["metadata"]["name"], "--ignore-not-found"
            )


def test_pods_refused_by_pod_security_surface_in_the_status(
    full_cluster: ControlPlane,
    crds: ControlPlane,
    namespace: str,
    node_factory: Any,
    tmp_path: pathlib.Path,
) -> None:
    cp = full_cluster
    # vLLM images run as root: the "restricted" level refuses their pods.
    cp.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    node_factory(gb200_tray(f"{namespace[:50]}-gb0", namespace))
    op = OperatorProcess(cp, tmp_path).start()
    try:
        cp.apply(serving(namespace, "psa"))

        obj = wait_condition(cp, namespace, "Ready", reason="PodsRefused", name="psa", timeout=90)
        message = condition(obj, "Ready")["message"]
        assert "FailedCreate" in message and "PodSecurity" in message, message
        # The Deployment itself was accepted; only its pods are refused.
        assert condition(obj, "WorkloadApplied").get("status") != "False"
    finally:
        op.stop()
