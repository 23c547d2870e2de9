"""The real vllm-router finds a disaggregated serving's engines the way the operator deploys it:
Kubernetes discovery through a real API server, with the token of the router's own
ServiceAccount bound to the Role the operator renders (pods get/list/watch, nothing else), and
the selectors and argv the operator renders.

No kubelet runs: the test creates one pod per role with the labels of the rendered pod templates
and writes their status as a kubelet would (Running, Ready, a pod IP on the loopback:
127.0.0.2 for prefill, 127.0.0.3 for decode), where a vLLM stand-in of that role listens on the
serving's port (tests/kind/vllm-standin/vllm). A request to the router must then be prefilled by
the prefill pod, decoded by the decode pod, and the decode must reach the prefill's side channel.
"""

from __future__ import annotations

import contextlib
import copy
import json
import pathlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from deepseek_operator.api.load import parse_serving
from deepseek_operator.nodes.facts import build_inventory
from deepseek_operator.plan import Observed, Plan, plan
from tests.integration.test_router_standin import (
    STANDIN,
    _router_binary,
    free_port,
    http,
    started,
    wait_ok,
)
from tests.k8s.cluster import ControlPlane

REPO = pathlib.Path(__file__).resolve().parents[2]
IPS = {"prefill": "127.0.0.2", "decode": "127.0.0.3"}
KV_ROLES = {"prefill": "kv_producer", "decode": "kv_consumer"}


def _plan(namespace: str, port: int) -> Plan:
    raw = yaml.safe_load((REPO / "examples/dsv41-flash-1p1d-gb200.yaml").read_text())
    raw["metadata"]["namespace"] = namespace
    raw["spec"]["port"] = port
    items = yaml.safe_load((REPO / "examples/nodes-gb200.yaml").read_text())["items"]
    return plan(
        parse_serving(raw), build_inventory(items), Observed.offline(), "2026-12-06T00:00:00Z"
    )


def _pod(planned: Plan, role: str, namespace: str) -> dict[str, Any]:
    """A pod with the labels of the role's rendered pod template."""
    workload = next(
        o
        for o in planned.objects
        if o["kind"] == "Deployment" and o["metadata"]["name"].endswith(f"-{role}")
    )
    labels = copy.deepcopy(workload["spec"]["template"]["metadata"]["labels"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pd-{role}-0", "namespace": namespace, "labels": labels},
        "spec": {"nodeName": "no-kubelet", "containers": [{"name": "vllm", "image": "vllm"}]},
    }


def _running(cp: ControlPlane, namespace: str, name: str, ip: str) -> None:
    """Write the pod's status as its kubelet would once the engine is ready."""
    now = "2026-12-06T00:00:00Z"
    status = {
        "status": {
            "phase": "Running",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "hostIP": "127.0.0.1",
            "startTime": now,
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": now}
                for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ],
        }
    }
    cp.kubectl(
        "patch", "pod", name, "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps(status),
    )  # fmt: skip


@pytest.fixture
def engines(tmp_path: pathlib.Path) -> Iterator[tuple[int, int]]:
    """Both stand-ins on the serving's port, one per loopback address: (port, side channel)."""
    port, side = free_port(), free_port()
    with contextlib.ExitStack() as stack:
        for role, ip in IPS.items():
            argv = [
                sys.executable, str(STANDIN), "serve", "m", "--served-model-name", "m",
                "--host", ip, "--port", str(port),
                "--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": KV_ROLES[role]}),
            ]  # fmt: skip
            env = {
                "HOSTNAME": f"pd-{role}-0",
                "VLLM_NIXL_SIDE_CHANNEL_HOST": ip,
                "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side),
            }
            proc = stack.enter_context(started(argv, env, tmp_path / f"{role}.log"))
            wait_ok(f"http://{ip}:{port}/health", proc, tmp_path / f"{role}.log")
        yield port, side


@pytest.mark.integration
def test_the_router_discovers_the_roles_with_its_own_role_and_serves_the_pair(
    control_plane: ControlPlane, namespace: str, engines: tuple[int, int], tmp_path: pathlib.Path
) -> None:
    router_binary = _router_binary()
    cp = control_plane
    port, side = engines
    planned = _plan(namespace, port)
    name = "dsv41-pd-api"
    # The router's identity and rights exactly as rendered.
    rbac = [o for o in planned.objects if o["kind"] in ("ServiceAccount", "Role", "RoleBinding")]
    cp.apply(rbac)
    who = f"system:serviceaccount:{namespace}:{name}"
    for verb, allowed in (("list", True), ("watch", True), ("get", True), ("delete", False)):
        out = cp.kubectl("auth", "can-i", verb, "pods", "-n", namespace, f"--as={who}", check=False)
        assert (out.stdout.strip() == "yes") is allowed, (verb, out.stdout)
    kubeconfig = cp.kubeconfig_for_token(
        cp.create_token(namespace, name), tmp_path / "router-kubeconfig", user="router"
    )
    for role, ip in IPS.items():
        pod = _pod(planned, role, namespace)
        cp.apply(pod)
        _running(cp, namespace, pod["metadata"]["name"], ip)

    deployment = next(
        o for o in planned.objects if (o["kind"], o["metadata"]["name"]) == ("Deployment", name)
    )
    args = list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    router_port = free_port()
    args[args.index("--host") + 1] = "127.0.0.1"
    args[args.index("--port") + 1] = str(router_port)
    argv = [
        str(router_binary), *args,
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
    ]  # fmt: skip
    # KUBECONFIG: kube-rs's client reads it when it runs outside a pod.
    env = {"KUBECONFIG": str(kubeconfig)}
    with started(argv, env, tmp_path / "router.log") as router:
        wait_ok(f"http://127.0.0.1:{router_port}/readiness", router, tmp_path / "router.log")
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
        url = f"http://127.0.0.1:{router_port}/v1/chat/completions"
        code, answer = http("POST", url, body)
        assert code == 200, (answer, (tmp_path / "router.log").read_text()[-3000:])
        assert answer["standin"] == {
            "prefill": "pd-prefill-0",
            "decode": "pd-decode-0",
            "side_channel": f"{IPS['prefill']}:{side}",
            "side_channel_reached": True,
        }
