"""``render --from-cluster`` reads the Nodes of the current kubeconfig (a real API server)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.dra_slices import dra_only, gpu_claim
from tests.gpu_nodes import make_gpu_node
from tests.k8s.cluster import ControlPlane, start_control_plane, stop_control_plane
from tests.k8s.operator import install_crds

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_render_from_cluster_sees_the_clusters_gpu_nodes(
    control_plane: ControlPlane, namespace: str
) -> None:
    name = f"{namespace}-gb"
    control_plane.create_node(
        make_gpu_node(
            name,
            agent_labels={"sm-family": "sm100", "nvlink.fully-connected": "true"},
            extra_labels={"pool": namespace},
        ),
        wait_ready=False,
    )
    try:
        control_plane.kubectl(
            "patch",
            "node",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(
                {
                    "status": {
                        "conditions": [
                            {"type": "Ready", "status": "True", "reason": "Test", "message": "test"}
                        ]
                    }
                }
            ),
        )
        dss = REPO / "examples/dsv41-flash-gb200.yaml"
        doc = dss.read_text().replace(
            "  tolerations:", f"  nodeSelector: {{pool: {namespace}}}\n  tolerations:"
        )
        path = pathlib.Path(control_plane.work_dir) / f"{namespace}.yaml"
        path.write_text(doc)
        out = subprocess.run(
            [sys.executable, "-m", "deepseek_operator.cli", "render", "-f", str(path), "--from-cluster", "-o", "json"],
            capture_output=True, text=True, cwd=REPO, env={**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        status = json.loads(out.stdout)["status"]
        assert status["resolved"]["moeBackend"] == "deep_gemm_mega_moe"
        assert status["resolved"]["eligibleNodes"] == 1
    finally:
        control_plane.delete_node(name)


@pytest.mark.integration
def test_render_from_cluster_without_a_reachable_cluster_is_one_line(
    tmp_path: pathlib.Path,
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "deepseek_operator.cli", "render", "-f", str(REPO / "examples/dsv41-flash-gb200.yaml"), "--from-cluster"],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "KUBECONFIG": str(kubeconfig)}, timeout=120,
    )  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.startswith("error: --from-cluster: cannot list Nodes")
    assert out.stderr.count("\n") == 1


@pytest.mark.integration
def test_render_from_cluster_renders_a_leaderworkerset_only_where_the_cluster_serves_it(
    control_plane: ControlPlane, namespace: str
) -> None:
    served = control_plane.kubectl("api-versions").stdout.split()
    has_lws = "leaderworkerset.x-k8s.io/v1" in served
    out = subprocess.run(
        [sys.executable, "-m", "deepseek_operator.cli", "render", "-f", str(REPO / "examples/dsv41-flash-dep8-nvl72.yaml"), "--from-cluster", "-o", "json"],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    kinds = {o["kind"] for o in printed["objects"]}
    placeable = next(c for c in printed["status"]["conditions"] if c["type"] == "Placeable")
    if has_lws:
        assert "LeaderWorkerSet" in kinds
        assert placeable["reason"] != "LeaderWorkerSetNotInstalled"
    else:
        assert printed["objects"] == []
        assert placeable["reason"] == "LeaderWorkerSetNotInstalled"


@pytest.fixture(scope="module")
def quiet_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A private API server with our CRDs and no operator: the session's plane may have one
    running (the e2e tier's), which would converge the live state before the dry run reads it."""
    cp = start_control_plane(lambda: tmp_path_factory.mktemp("quiet-plane"))
    try:
        install_crds(cp)
        yield cp
    finally:
        stop_control_plane(cp)


@pytest.mark.integration
def test_render_from_cluster_lists_the_actions_against_the_live_objects_deletes_too(
    quiet_plane: ControlPlane,
) -> None:
    """The object exists, one child the plan no longer holds is there: the dry run says the
    status would be patched, the children created, and that stale one deleted."""
    crds, namespace = quiet_plane, "dry-run"
    crds.kubectl("create", "namespace", namespace)
    doc = yaml.safe_load((REPO / "examples/dsv41-flash-gb200.yaml").read_text())
    doc["metadata"] = {"name": "dry", "namespace": namespace}
    crds.apply(json.dumps(doc))
    uid = crds.kubectl_json("get", "deepseekserving", "dry", "-n", namespace)["metadata"]["uid"]
    labels = {
        "app.kubernetes.io/managed-by": "deepseek-operator",
        "app.kubernetes.io/instance": "dry",
    }
    owner = {"apiVersion": "serving.deepseek-operator.io/v1alpha1", "kind": "DeepSeekServing",
             "name": "dry", "uid": uid, "controller": True}  # fmt: skip
    stale = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "dry-old", "namespace": namespace, "labels": labels,
                     "ownerReferences": [owner]},
        "spec": {"ports": [{"port": 80}], "selector": labels},
    }  # fmt: skip
    crds.apply(json.dumps(stale))
    path = pathlib.Path(crds.work_dir) / f"{namespace}-dry.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = subprocess.run(
        [sys.executable, "-m", "deepseek_operator.cli", "render", "-f", str(path), "--from-cluster", "-o", "json"],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "KUBECONFIG": str(crds.kubeconfig)}, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    actions = json.loads(out.stdout)["actions"]
    assert actions[0] == "patch status", actions
    assert "delete Service/dry-old" in actions, actions
    assert any(a.startswith("create ") for a in actions), actions
    assert any(a.startswith("event Normal BackendResolved") for a in actions), actions
    # nothing was written: the stale child is still there, the status still empty
    crds.kubectl("get", "service", "dry-old", "-n", namespace)
    assert "status" not in crds.kubectl_json("get", "deepseekserving", "dry", "-n", namespace)
    text = subprocess.run(
        [sys.executable, "-m", "deepseek_operator.cli", "render", "-f", str(path), "--from-cluster"],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "KUBECONFIG": str(crds.kubeconfig)}, timeout=60,
    )  # fmt: skip
    assert "Actions against the cluster (nothing is written):" in text.stdout, text.stdout
    assert "  delete Service/dry-old" in text.stdout


def _render(cp: ControlPlane, path: pathlib.Path, *source: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "deepseek_operator.cli", "render", "-f", str(path), *source, "-o", "json"],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "KUBECONFIG": str(cp.kubeconfig)}, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout)["status"])


@pytest.mark.integration
def test_render_from_cluster_counts_only_devices_no_claim_holds(
    control_plane: ControlPlane, namespace: str
) -> None:
    """A DRA-only tray, and a claim (its allocation written as the scheduler would) holding two
    of its four GPUs: --from-cluster lists the claims and says what the --nodes file of
    ``kubectl get nodes,resourceslices,resourceclaims -A -o yaml`` says."""
    name = f"{namespace}-dra"
    twin, gpu_slice = dra_only(
        make_gpu_node(name, "NVIDIA-GB200", extra_labels={"pool": namespace})
    )
    assert gpu_slice is not None
    control_plane.create_node(twin, wait_ready=False)
    try:
        ready = {"type": "Ready", "status": "True", "reason": "Test", "message": "test"}
        control_plane.kubectl(
            "patch", "node", name, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"conditions": [ready]}}),
        )  # fmt: skip
        control_plane.apply(gpu_slice)
        claim = gpu_claim("holder", name, ["gpu-0", "gpu-1"], namespace=namespace)
        status = claim.pop("status")
        control_plane.apply(claim)
        control_plane.kubectl(
            "patch", "resourceclaim", "holder", "-n", namespace, "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": status}),
        )  # fmt: skip
        doc = yaml.safe_load((REPO / "examples/dsv41-flash-gb200.yaml").read_text())
        doc["spec"]["nodeSelector"] = {"pool": namespace}
        doc["spec"].pop("tolerations", None)
        path = pathlib.Path(control_plane.work_dir) / f"{namespace}-dra.yaml"
        path.write_text(yaml.safe_dump(doc))
        live = _render(control_plane, path, "--from-cluster")
        placeable = next(c for c in live["conditions"] if c["type"] == "Placeable")
        assert placeable["status"] == "False"
        assert (
            f"{name}: 2 of 4 devices free, 2 held by other claims < 4 per pod"
            in placeable["message"]
        )
        dump = control_plane.kubectl(
            "get", "nodes,resourceslices,resourceclaims", "-A", "-o", "yaml"
        )
        nodes = pathlib.Path(control_plane.work_dir) / f"{namespace}-cluster.yaml"
        nodes.write_text(dump.stdout)
        offline = _render(control_plane, path, "--nodes", str(nodes))

        def said(status: dict[str, Any]) -> list[tuple[str, ...]]:
            return [
                (c["type"], c["status"], c["reason"], c["message"]) for c in status["conditions"]
            ]

        assert said(offline) == said(live)
        assert offline["resolved"] == live["resolved"]
    finally:
        control_plane.kubectl(
            "delete", "resourceclaim", "holder", "-n", namespace, "--ignore-not-found"
        )
        control_plane.kubectl(
            "delete", "resourceslice", gpu_slice["metadata"]["name"], "--ignore-not-found"
        )
        control_plane.delete_node(name)
