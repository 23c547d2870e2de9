"""The chart on kind with the image built here: real kubelet, probes, pod network, failover.

The README's kind recipe, step for step, with the locally built images: label the node as a GB200
tray, load the image with ``kind load docker-image``, ``helm install`` (agent off, as the README
says), apply the seed example. The operator's two replicas must become Ready under the kubelet's
real probes, running with in-cluster configuration and only the chart's RBAC; the seed
DeepSeekServing must resolve to ``deep_gemm_mega_moe`` and its vLLM Deployment must exist (its pod
stays Pending: the example asks for 16 CPUs and 256 GiB). Then the active operator pod is deleted
and the standby must take over: the time from the delete to a spec change being reconciled is
measured and printed.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.k8s.cluster import wait_for
from tests.kind.conftest import ROOT, KindCluster

pytestmark = pytest.mark.kind

NS = "deepseek-operator"


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == ctype), {})


def operator_pods(kc: KindCluster) -> list[dict[str, Any]]:
    pods = kc.kubectl_json("get", "pods", "-n", NS, "-l", "app.kubernetes.io/component=operator")[
        "items"
    ]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def ready(pod: dict[str, Any]) -> bool:
    return condition(pod, "Ready").get("status") == "True"


def test_readme_kind_recipe_with_the_local_images_and_failover(kind_cluster: KindCluster) -> None:
    kc = kind_cluster
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    kc.kubectl(
        "label", "node", kc.node, "nvidia.com/gpu.product=NVIDIA-GB200",
        "nvidia.com/gpu.compute.major=10", "nvidia.com/gpu.compute.minor=0", "nvidia.com/gpu.count=4",
    )  # fmt: skip
    kc.kubectl(
        "patch", "node", kc.node, "--subresource=status", "--type=merge", "-p",
        json.dumps({"status": {"capacity": {"nvidia.com/gpu": "4"}, "allocatable": {"nvidia.com/gpu": "4"}}}),
    )  # fmt: skip
    kc.run(kc.kind, "load", "docker-image", kc.image, "--name", kc.name)
    repository, _, tag = kc.image.partition(":")
    kc.helm(
        "install", "deepseek-operator", str(ROOT / "charts" / "deepseek-operator"), "-n", NS,
        "--create-namespace", "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
        "--set", "agent.enabled=false",
    )  # fmt: skip
    kc.kubectl("create", "namespace", "llm")
    kc.kubectl("apply", "-f", str(ROOT / "examples" / "dsv41-flash-gb200.yaml"))

    # Both replicas Ready under the kubelet's probes, never restarted.
    pods = wait_for(
        lambda: p if len(p := operator_pods(kc)) == 2 and all(map(ready, p)) else None,
        timeout=180,
        what="two Ready operator pods",
    )
    timings["operators_ready"] = time.monotonic() - t0
    assert all(p["status"]["containerStatuses"][0]["restartCount"] == 0 for p in pods)

    def resolved() -> dict[str, Any] | None:
        obj = kc.kubectl_json("get", "dss", "dsv41", "-n", "llm")
        return obj if condition(obj, "BackendResolved").get("status") == "True" else None

    obj = wait_for(resolved, timeout=120, what="BackendResolved=True")
    timings["resolved"] = time.monotonic() - t0
    assert condition(obj, "BackendResolved")["reason"] == "MegaMoESelected"
    assert obj["status"]["resolved"]["moeBackend"] == "deep_gemm_mega_moe"
    assert kc.kubectl("get", "deployment", "dsv41", "-n", "llm", check=False).returncode == 0
    printed = kc.kubectl("get", "dss", "-n", "llm").stdout
    assert "deep_gemm_mega_moe" in printed

    # The active replica is the one that reconciled; the standby only waits in the peering.
    logs = {
        p["metadata"]["name"]: kc.kubectl("logs", "-n", NS, p["metadata"]["name"]).stdout
        for p in pods
    }
    active = [name for name, text in logs.items() if "Reconciled DeepSeekServing" in text]
    assert len(active) == 1, {n: t[-2000:] for n, t in logs.items()}
    for text in logs.values():
        assert "403" not in text and "Forbidden" not in text, text[-3000:]

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
    print("kind tier timings (s):", {k: round(v, 1) for k, v in timings.items()})
