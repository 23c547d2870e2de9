"""The vLLM router of a disaggregated serving on the local control plane (kwok GB200 trays): its
ServiceAccount, Role, RoleBinding, Deployment, Service and the NetworkPolicies are written by the
operator, restored when edited or deleted by hand, and removed when the router is turned off;
status.endpoint and status.router report it, Ready waits for its pod, and a pair with an empty
role says it cannot serve.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.gpu_nodes import HEALTHY_GB200_AGENT_LABELS, make_gpu_node
from tests.k8s.cluster import ControlPlane, wait_for
from tests.k8s.conditions import wait_condition
from tests.k8s.operator import OperatorProcess, patch_serving
from tests.servings import PD_GB200, serving

pytestmark = pytest.mark.e2e

NAME = "pd"
ROUTER = f"{NAME}-api"
ROUTER_KINDS = ("serviceaccount", "role", "rolebinding", "deployment", "service", "networkpolicy")


def _gb200(name: str, pool: str) -> dict[str, Any]:
    return make_gpu_node(
        name,
        "NVIDIA-GB200",
        4,
        (10, 0),
        agent_labels=HEALTHY_GB200_AGENT_LABELS,
        extra_labels={"pool": pool},
    )


def _exists(cp: ControlPlane, namespace: str, kind: str, name: str) -> bool:
    return cp.kubectl("get", kind, name, "-n", namespace, check=False).returncode == 0


def test_the_router_is_written_restored_reported_and_removed(
    operator: OperatorProcess, full_cluster: ControlPlane, namespace: str, node_factory: Any
) -> None:
    cp = full_cluster
    node_factory(_gb200(f"{namespace}-gb0", namespace), _gb200(f"{namespace}-gb1", namespace))
    cp.apply(serving(namespace, NAME, example=PD_GB200))

    # Both pools and the router pod run (kwok), so Ready holds with the router in it.
    obj = wait_condition(cp, namespace, "Ready", "True", name=NAME, timeout=120)
    assert obj["status"]["endpoint"] == {
        "service": ROUTER,
        "host": f"{ROUTER}.{namespace}.svc",
        "port": 8000,
        "url": f"http://{ROUTER}.{namespace}.svc:8000",
    }
    assert obj["status"]["router"]["readyReplicas"] == 1
    for kind in ROUTER_KINDS:
        assert _exists(cp, namespace, kind, ROUTER), kind
    for role in ("prefill", "decode"):
        assert _exists(cp, namespace, "networkpolicy", f"{NAME}-{role}-engines")
    table = cp.kubectl("get", "dss", NAME, "-n", namespace).stdout
    assert "ROUTER" in table and f"http://{ROUTER}.{namespace}.svc:8000" in table
    role = cp.kubectl_json("get", "role", ROUTER, "-n", namespace)
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    args = cp.kubectl_json("get", "deployment", ROUTER, "-n", namespace)["spec"]["template"][
        "spec"
    ]["containers"][0]["args"]
    assert args[args.index("--service-discovery-namespace") + 1] == namespace

    # A hand edit of the Role (wider rights) and a deleted fence are put back.
    wider = [{"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["get", "list"]}]
    cp.kubectl(
        "patch", "role", ROUTER, "-n", namespace, "--type=merge", "-p", json.dumps({"rules": wider})
    )
    cp.kubectl("delete", "networkpolicy", f"{NAME}-prefill-engines", "-n", namespace)
    wait_for(
        lambda: (
            cp.kubectl_json("get", "role", ROUTER, "-n", namespace)["rules"] == role["rules"]
            and _exists(cp, namespace, "networkpolicy", f"{NAME}-prefill-engines")
        ),
        timeout=60,
        what="the Role and the prefill fence restored",
    )

    # A pair with an empty role cannot serve, whatever its pods say.
    roles = copy.deepcopy(
        serving(namespace, NAME, example=PD_GB200)["spec"]["disaggregation"]["roles"]
    )
    next(r for r in roles if r["role"] == "decode")["replicas"] = 0
    patch_serving(cp, namespace, {"spec": {"disaggregation": {"roles": roles}}}, name=NAME)
    obj = wait_condition(cp, namespace, "Ready", "False", reason="PairCannotServe", name=NAME)
    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
    assert ready["message"].startswith("decode has 0 replicas beside prefill's 1")

    # router: {enabled: false}: the router's objects go, the engines stay fenced.
    patch_serving(cp, namespace, {"spec": {"router": {"enabled": False}}}, name=NAME)
    wait_for(
        lambda: not any(_exists(cp, namespace, kind, ROUTER) for kind in ROUTER_KINDS),
        timeout=60,
        what="every router object deleted",
    )
    obj = cp.kubectl_json("get", "dss", NAME, "-n", namespace)
    assert "endpoint" not in obj["status"] and "router" not in obj["status"]
    assert _exists(cp, namespace, "networkpolicy", f"{NAME}-prefill-engines")
    assert "Traceback" not in operator.log_path.read_text(errors="replace")
