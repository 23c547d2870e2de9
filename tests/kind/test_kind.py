"""The chart on kind with the image built here: real kubelet, probes, pod network, failover.

The README's kind recipe (run once by the session fixture, ``tests/kind/conftest.py``) creates a
control plane and three labelled workers, the pod network, CoreDNS, kube-network-policies and the
LeaderWorkerSet controller, loads the image with ``kind load docker-image``, ``helm install``s the
operator (agent off) and applies the seed example. The operator's namespace then enforces Pod
Security ``restricted`` (its running pods must pass a server-side dry run first), so the
replacement pod of the failover below is admitted under it. The operator's two replicas must
become Ready under the kubelet's real probes, running with in-cluster configuration and only the
chart's RBAC; the seed DeepSeekServing must resolve to ``deep_gemm_mega_moe`` and its vLLM
Deployment must exist. Then the active operator pod is deleted and the standby must take over:
the time from the delete to a spec change being reconciled is measured and printed. Next, the
agent DaemonSet is switched on and the H200 node labelled ``nvidia.com/gpu.present=true``: the
agent pod must run (no NVIDIA driver here), log the missing NVML once and publish
``present=false`` only. Last, the serving runs the vLLM stand-in on a GB200 tray, turns Ready,
survives its pod's deletion, and is deleted (its Deployment with it), freeing the tray.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from deepseek_operator import names
from tests.k8s.cluster import wait_for
from tests.kind.conftest import H200_NODE, ROOT, STANDIN_IMAGE, KindCluster
from tests.kind.recipe import recipe_commands

pytestmark = pytest.mark.kind

NS = "deepseek-operator"
OPERATOR_SELECTOR = "app.kubernetes.io/component=operator"


def test_the_readme_recipe_is_what_the_tier_runs() -> None:
    script = recipe_commands()
    assert script[0].startswith("make kind-node")
    create = next(c for c in script if " create cluster " in c)
    assert create.endswith(
        "--image deepseek-operator-kind-node:v1.36.3 --config hack/kind-cluster.yaml"
    )
    assert any("kubectl apply -f hack/kind-network.yaml" in c and "kube-network-policies.yaml" in c
               for c in script)  # fmt: skip
    assert any(c.startswith("helm install lws ") for c in script)
    assert any("kind load docker-image deepseek-operator:dev" in c for c in script)
    assert any(c.startswith("helm install deepseek-operator") for c in script)
    assert script[-1] == "kubectl get dss -n llm"


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == ctype), {})


def operator_pods(kc: KindCluster) -> list[dict[str, Any]]:
    pods = kc.kubectl_json("get", "pods", "-n", NS, "-l", OPERATOR_SELECTOR)["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def ready(pod: dict[str, Any]) -> bool:
    return condition(pod, "Ready").get("status") == "True"


def test_readme_kind_recipe_with_the_local_images_and_failover(kind_cluster: KindCluster) -> None:
    kc = kind_cluster
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    assert "deep_gemm_mega_moe" in kc.recipe_stdout or "dsv41" in kc.recipe_stdout, kc.recipe_stdout

    # Both replicas Ready under the kubelet's probes, never restarted.
    pods = wait_for(
        lambda: p if len(p := operator_pods(kc)) == 2 and all(map(ready, p)) else None,
        timeout=180,
        what="two Ready operator pods",
    )
    timings["operators_ready"] = time.monotonic() - t0
    assert all(p["status"]["containerStatuses"][0]["restartCount"] == 0 for p in pods)

    seen: dict[str, Any] = {}

    def resolved() -> dict[str, Any] | None:
        obj = kc.kubectl_json("get", "dss", "dsv41", "-n", "llm")
        seen["condition"] = condition(obj, "BackendResolved")
        return obj if seen["condition"].get("status") == "True" else None

    try:
        obj = wait_for(resolved, timeout=120, what="BackendResolved=True")
    except AssertionError as exc:
        # What the operators said and did: a timeout alone tells the next reader nothing.
        logs = kc.kubectl("logs", "-n", NS, "-l", OPERATOR_SELECTOR, "--tail=40", check=False)
        raise AssertionError(f"{exc}; last BackendResolved: {seen.get('condition')}; "
                             f"operator logs:\n{logs.stdout}{logs.stderr}") from None  # fmt: skip
    timings["resolved"] = time.monotonic() - t0
    assert condition(obj, "BackendResolved")["reason"] == "MegaMoESelected"
    assert obj["status"]["resolved"]["moeBackend"] == "deep_gemm_mega_moe"
    assert kc.kubectl("get", "deployment", "dsv41", "-n", "llm", check=False).returncode == 0
    printed = kc.kubectl("get", "dss", "-n", "llm").stdout
    assert "deep_gemm_mega_moe" in printed

    # Pod Security Admission, for real: the chart's pods meet `restricted`. A server-side dry run
    # of the enforce label makes the API server evaluate the running pods and warn per violation.
    psa = kc.kubectl(
        "label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted",
        "--dry-run=server", "--overwrite",
    )  # fmt: skip
    assert "violate" not in psa.stderr and "Warning" not in psa.stderr, psa.stderr
    kc.kubectl("label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted")

    # The active replica: the highest priority in the chart's ClusterKopfPeering (kopf's rule;
    # its peer ids are "<user>@<pod name>/<start time>/<random>").
    deploy = kc.kubectl_json(
        "get", "deployment", "-n", NS, "-l", "app.kubernetes.io/component=operator"
    )
    args = deploy["items"][0]["spec"]["template"]["spec"]["containers"][0]["args"]
    peering = next(a.split("=", 1)[1] for a in args if a.startswith("--peering="))

    def peers() -> dict[str, Any] | None:
        status = kc.kubectl_json("get", "clusterkopfpeering", peering).get("status") or {}
        return status if len(status) >= 2 else None

    status = wait_for(peers, timeout=60, what="both replicas in the peering")
    leader_id = max(status, key=lambda k: status[k]["priority"])
    active = [p["metadata"]["name"] for p in pods if f"@{p['metadata']['name']}/" in leader_id]
    assert len(active) == 1, (leader_id, [p["metadata"]["name"] for p in pods])
    for p in pods:
        text = kc.kubectl("logs", "-n", NS, p["metadata"]["name"]).stdout
        # An RBAC refusal reads "(403)" / "Forbidden" (kubernetes client) or "forbidden" (kopf).
        assert "(403)" not in text and "forbidden" not in text.lower(), text[-3000:]

    # Failover: delete the active pod (the kubelet sends SIGTERM), then change the spec; the
    # standby must reconcile it.
    generation = obj["metadata"]["generation"]
    t_kill = time.monotonic()
    # --wait: only once the pod is gone can nothing but the standby act on the change.
    kc.kubectl("delete", "pod", "-n", NS, active[0], "--wait=true", timeout=120)
    timings["active_pod_gone"] = time.monotonic() - t_kill
    t_gone = time.monotonic()
    kc.kubectl(
        "patch", "dss", "dsv41", "-n", "llm", "--type=merge", "-p",
        json.dumps({"spec": {"engine": {"maxNumSeqs": 32}}}),
    )  # fmt: skip

    def reconciled() -> bool:
        got = kc.kubectl_json("get", "dss", "dsv41", "-n", "llm")
        return bool(got.get("status", {}).get("observedGeneration", 0) > generation)

    wait_for(reconciled, timeout=180, what="the standby to reconcile the changed spec")
    timings["standby_reconciled_after_gone"] = time.monotonic() - t_gone
    timings["failover_total"] = time.monotonic() - t_kill

    # The agent as a real DaemonSet pod on a node labelled as a GPU node: no NVIDIA driver here,
    # so it must report the missing NVML (once, at info), publish present=false and keep running.
    t_agent = time.monotonic()
    kc.helm(
        "upgrade", "deepseek-operator", str(ROOT / "charts" / "deepseek-operator"), "-n", NS,
        "--reuse-values", "--set", "agent.enabled=true",
    )  # fmt: skip
    kc.kubectl("label", "node", H200_NODE, "nvidia.com/gpu.present=true")

    def agent_running() -> dict[str, Any] | None:
        items = kc.kubectl_json("get", "pods", "-n", NS, "-l", "app.kubernetes.io/component=agent")[
            "items"
        ]
        return items[0] if items and items[0]["status"].get("phase") == "Running" else None

    agent = wait_for(agent_running, timeout=120, what="the agent pod Running")

    def published() -> dict[str, str] | None:
        labels = kc.kubectl_json("get", "node", H200_NODE)["metadata"]["labels"]
        return labels if labels.get(names.AGENT_PRESENT) == "false" else None

    labels = wait_for(published, timeout=120, what="present=false from the agent pod")
    timings["agent_published"] = time.monotonic() - t_agent
    ours = {k for k in labels if k.startswith(names.AGENT_PREFIX)}
    assert ours == {names.AGENT_PRESENT}
    log = kc.kubectl("logs", "-n", NS, agent["metadata"]["name"]).stdout
    assert log.count("No GPUs on this Node") == 1 and "NVML" in log, log
    assert "level=error" not in log and "Traceback" not in log, log
    assert agent["status"]["containerStatuses"][0]["restartCount"] == 0

    # The vLLM workload for real: the stand-in image (kind load), small requests, so the pod runs
    # under the kubelet's startup/readiness/liveness probes on /health and the serving turns Ready.
    # Then its pod is deleted: the Deployment brings a new one and the status says so.
    t_vllm = time.monotonic()
    kc.kubectl(
        "patch", "dss", "dsv41", "-n", "llm", "--type=merge", "-p",
        json.dumps({"spec": {"image": STANDIN_IMAGE,
                             "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}}),
    )  # fmt: skip

    def serving_ready() -> dict[str, Any] | None:
        got = kc.kubectl_json("get", "dss", "dsv41", "-n", "llm")
        return got if condition(got, "Ready").get("status") == "True" else None

    def vllm_pods() -> list[dict[str, Any]]:
        items = kc.kubectl_json(
            "get", "pods", "-n", "llm", "-l", "app.kubernetes.io/instance=dsv41"
        )["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    try:
        wait_for(serving_ready, timeout=240, what="Ready=True with the vLLM stand-in")
    except BaseException:
        print(kc.kubectl("describe", "pods", "-n", "llm", check=False).stdout[-4000:])
        raise
    timings["vllm_ready"] = time.monotonic() - t_vllm
    (first,) = vllm_pods()
    assert first["spec"]["containers"][0]["image"] == STANDIN_IMAGE
    assert ready(first)
    t_del = time.monotonic()
    kc.kubectl("delete", "pod", "-n", "llm", first["metadata"]["name"], "--wait=false")

    def not_ready() -> dict[str, Any] | None:
        got = kc.kubectl_json("get", "dss", "dsv41", "-n", "llm")
        return got if condition(got, "Ready").get("status") == "False" else None

    dropped = wait_for(not_ready, timeout=120, what="Ready=False while the pod is replaced")
    assert "0/1" in condition(dropped, "Ready").get("message", ""), condition(dropped, "Ready")
    wait_for(serving_ready, timeout=240, what="Ready=True again with a new pod")
    timings["vllm_pod_replaced"] = time.monotonic() - t_del
    (second,) = vllm_pods()
    assert second["metadata"]["name"] != first["metadata"]["name"] and ready(second)

    # Deleting the serving deletes its Deployment (owner reference) and frees the GB200 tray the
    # multi-node group of tests/kind/test_lws.py needs.
    kc.kubectl("delete", "dss", "dsv41", "-n", "llm", "--wait=true", timeout=120)
    wait_for(
        lambda: (
            kc.kubectl("get", "deployment", "dsv41", "-n", "llm", check=False).returncode != 0
            and not vllm_pods()
        ),
        timeout=120,
        what="the Deployment and its pod garbage-collected",
    )
    print("kind tier timings (s):", {k: round(v, 1) for k, v in timings.items()})
