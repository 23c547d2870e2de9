"""The real kube-scheduler allocates the GPU claims ``plan()`` renders on a DRA-only pool.

Hand-made, NVIDIA-shaped ``gpu.nvidia.com`` ResourceSlices on kwok nodes (as Kubernetes' own
scheduler perf tests do): the DynamicResources plugin reads slices, DeviceClasses and claims from
the API only, so no kubelet or driver is involved. This proves the CEL selectors the operator
writes are valid for the pinned v1.36 scheduler and mean what the decision meant: a MegaMoE pod
gets four SM100 devices of one tray, never the free H200 devices, and a second pod whose tray is
taken by the first one's claim stays Pending. ``render --from-cluster`` reads the same slices.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import yaml

from deepseek_operator.api.load import parse_serving
from deepseek_operator.nodes.facts import build_inventory
from deepseek_operator.plan import Observed, plan
from tests.dra_slices import dra_only, gpu_device_class, owned_by
from tests.gpu_nodes import HEALTHY_GB200_AGENT_LABELS, make_gpu_node
from tests.k8s.cluster import ControlPlane, unique_name, wait_for
from tests.unit.test_dra_claims import ROOT

SET_LABEL = "test.deepseek-operator.io/dra-set"
NOW = "2026-01-01T00:00:00Z"


def _pool(node_factory: Callable[..., list[Any]], set_name: str) -> tuple[list[Any], list[Any]]:
    """One DRA-only GB200 tray and one DRA-only HGX H200 node, created, with their slices."""
    labelled = [
        make_gpu_node(f"{set_name}-gb200", "NVIDIA-GB200", agent_labels=HEALTHY_GB200_AGENT_LABELS),
        make_gpu_node(f"{set_name}-h200", "NVIDIA-H200", count=8),
    ]
    twins = [dra_only(n) for n in labelled]
    for twin, _ in twins:
        twin["metadata"]["labels"][SET_LABEL] = set_name
    created = node_factory(*(twin for twin, _ in twins))
    slices = [owned_by(s, node) for (_, s), node in zip(twins, created, strict=True) if s]
    return created, slices


def test_the_scheduler_gives_a_megamoe_claim_only_sm100_devices(
    full_cluster: ControlPlane, namespace: str, node_factory: Callable[..., list[Any]]
) -> None:
    cp = full_cluster
    set_name = unique_name("dra")
    nodes, slices = _pool(node_factory, set_name)
    cp.apply(gpu_device_class())
    cp.apply(slices)
    body = yaml.safe_load((ROOT / "examples/dsv41-flash-gb200.yaml").read_text())
    body["metadata"]["namespace"] = namespace
    body["spec"]["nodeSelector"] = {SET_LABEL: set_name}
    planned = plan(parse_serving(body), build_inventory(nodes, slices), Observed.offline(), NOW)
    assert planned.resolution.gpu_claims
    assert planned.resolution.placement.eligible == (f"{set_name}-gb200",)
    template, deployment = planned.objects[0], planned.objects[1]
    assert (template["kind"], deployment["kind"]) == ("ResourceClaimTemplate", "Deployment")
    deployment["spec"]["replicas"] = 2  # one tray: the second pod finds its devices taken
    cp.apply([template, deployment])

    def placed() -> tuple[list[Any], list[Any]] | None:
        pods = cp.kubectl_json("get", "pods", "-n", namespace)["items"]
        claims = cp.kubectl_json("get", "resourceclaims", "-n", namespace)["items"]
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        pending = [
            p
            for p in pods
            if any(
                c.get("type") == "PodScheduled" and c.get("status") == "False"
                for c in p["status"].get("conditions", [])
            )
        ]
        allocated = [c for c in claims if c.get("status", {}).get("allocation")]
        if len(running) == 1 and len(pending) == 1 and len(allocated) == 1:
            return running + pending, allocated
        return None

    (running, pending), (claim,) = wait_for(
        placed, timeout=150, what="one pod Running, one Pending"
    )
    assert running["spec"]["nodeName"] == f"{set_name}-gb200"
    results = claim["status"]["allocation"]["devices"]["results"]
    assert sorted(r["device"] for r in results) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert {(r["driver"], r["pool"]) for r in results} == {("gpu.nvidia.com", f"{set_name}-gb200")}
    # Eight free H200 devices do not satisfy the MegaMoE claim: the second pod waits.
    scheduled = next(c for c in pending["status"]["conditions"] if c["type"] == "PodScheduled")
    assert scheduled["reason"] == "Unschedulable", scheduled


def test_render_from_cluster_reads_the_gpu_slices(
    control_plane: ControlPlane, namespace: str, node_factory: Callable[..., list[Any]]
) -> None:
    twin, gpus = dra_only(
        make_gpu_node(
            f"{namespace}-gb200",
            agent_labels=HEALTHY_GB200_AGENT_LABELS,
            extra_labels={"pool": namespace},
            ready=True,
        )
    )
    (node,) = node_factory(twin, wait_ready=False)
    assert gpus is not None
    control_plane.apply(owned_by(gpus, node))
    body = yaml.safe_load((ROOT / "examples/dsv41-flash-gb200.yaml").read_text())
    body["spec"]["nodeSelector"] = {"pool": namespace}
    path = pathlib.Path(control_plane.work_dir) / f"{namespace}-dra.yaml"
    path.write_text(yaml.safe_dump(body))
    out = subprocess.run(
        [sys.executable, "-m", "deepseek_operator.cli", "render", "-f", str(path), "--from-cluster", "-o", "json"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    assert printed["status"]["resolved"]["moeBackend"] == "deep_gemm_mega_moe"
    assert printed["status"]["resolved"]["eligibleNodes"] == 1
    assert printed["objects"][0]["kind"] == "ResourceClaimTemplate"
