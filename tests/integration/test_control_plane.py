"""The local control plane itself: CRD install, scheduling onto kwok GPU nodes, helm."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.gpu_nodes import make_gpu_node
from tests.k8s.cluster import ControlPlane, require_binaries, unique_name, wait_for

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "serving.deepseek-operator.io_deepseekservings.yaml"
CRD_NAME = "deepseekservings.serving.deepseek-operator.io"


@pytest.mark.integration
def test_apiserver_version_and_rbac_on(control_plane: ControlPlane) -> None:
    version = control_plane.kubectl_json("version")
    assert version["serverVersion"]["gitVersion"].startswith("v1.")
    assert version["serverVersion"]["gitVersion"] != "v0.0.0-master+$Format:%H$"
    # RBAC is enforced: an identity with no bindings is refused.
    can = control_plane.kubectl(
        "auth", "can-i", "list", "pods", "--as=system:serviceaccount:default:nobody", check=False
    )
    assert can.stdout.strip() == "no"


@pytest.mark.integration
def test_serviceaccount_token_authenticates_with_node_name_extra(
    control_plane: ControlPlane, namespace: str, node_factory, tmp_path: Path
) -> None:
    node = unique_name("sa-node")
    node_factory(make_gpu_node(node))
    control_plane.kubectl("create", "serviceaccount", "probe", "-n", namespace)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "agent", "namespace": namespace},
        "spec": {
            "serviceAccountName": "probe",
            "nodeName": node,
            "containers": [{"name": "c", "image": "example.invalid/agent:test"}],
        },
    }
    control_plane.apply(pod)
    token = control_plane.create_token(namespace, "probe", bound_object=("Pod", "agent"))
    kubeconfig = control_plane.kubeconfig_for_token(token, tmp_path / "probe.kubeconfig")
    kubectl = str(control_plane.bin_dir / "kubectl")
    whoami = subprocess.run(
        [kubectl, f"--kubeconfig={kubeconfig}", "auth", "whoami", "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    user = json.loads(whoami.stdout)["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{namespace}:probe"
    # What a ValidatingAdmissionPolicy sees as request.userInfo.extra for the node agent.
    assert user["extra"]["authentication.kubernetes.io/node-name"] == [node]
    # The same token through the Python client.
    from kubernetes import client

    with control_plane.api_client(token=token) as api:
        review = client.AuthenticationV1Api(api).create_self_subject_review({})
    assert review.status.user_info.username == user["username"]


@pytest.mark.integration
def test_crd_installs_and_explains_moe_backend(control_plane: ControlPlane) -> None:
    if not CRD_FILE.exists():
        pytest.fail(f"{CRD_FILE} is missing (generate it with `deepseek-operator crds`)")
    control_plane.kubectl("apply", "--server-side", "-f", str(CRD_FILE))
    control_plane.wait_established(CRD_NAME)
    # Established can precede discovery; poll until the resource is served.
    wait_for(
        lambda: control_plane.kubectl("get", "deepseekservings", "-A", check=False).returncode == 0,
        timeout=30,
        what="deepseekservings in discovery",
    )
    # kubectl explain reads the published OpenAPI v3 document, which lags a little further.
    explain = wait_for(
        lambda: (
            control_plane.kubectl("explain", "deepseekserving.spec.moeBackend", check=False).stdout
        ),
        timeout=30,
        what="kubectl explain deepseekserving.spec.moeBackend",
    )
    assert "MoE" in explain


NVLINK_LABEL = "gpu.deepseek-operator.io/nvlink.fully-connected"


def _deployment(name: str, product: str, gpus: int, replicas: int) -> dict[str, object]:
    labels = {"app": name}
    match = [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": [product]},
        {"key": NVLINK_LABEL, "operator": "In", "values": ["true"]},
    ]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": match}]
            }
        }
    }
    container = {
        "name": "vllm",
        "image": "example.invalid/vllm:test",
        "resources": {
            "requests": {"nvidia.com/gpu": str(gpus), "cpu": "1"},
            "limits": {"nvidia.com/gpu": str(gpus)},
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"affinity": affinity, "containers": [container]},
            },
        },
    }


@pytest.mark.e2e
def test_scheduler_places_pods_on_matching_kwok_gpu_nodes(
    full_cluster: ControlPlane, namespace: str, node_factory
) -> None:
    good = [unique_name("gb200-good") for _ in range(2)]
    wrong_product = unique_name("h100")
    no_nvlink = unique_name("gb200-no-nvlink")
    node_factory(
        *(make_gpu_node(n, agent_labels={"nvlink.fully-connected": "true"}) for n in good),
        make_gpu_node(
            wrong_product,
            product="NVIDIA-H100-80GB-HBM3",
            count=8,
            cc=(9, 0),
            agent_labels={"nvlink.fully-connected": "true"},
        ),
        make_gpu_node(no_nvlink, agent_labels={"nvlink.fully-connected": "false"}),
    )
    name = "vllm"
    # 4 GPUs per pod, 4 per node: each pod needs a whole GB200 node of its own.
    full_cluster.apply(_deployment(name, "NVIDIA-GB200", gpus=4, replicas=2), "-n", namespace)

    def pods_running() -> list[dict[str, object]] | None:
        pods = full_cluster.kubectl_json("get", "pods", "-n", namespace, "-l", f"app={name}")
        items = pods["items"]
        if len(items) == 2 and all(p["status"].get("phase") == "Running" for p in items):
            return items
        return None

    pods = wait_for(pods_running, timeout=90, what="2 Running pods")
    placed = sorted(p["spec"]["nodeName"] for p in pods)  # type: ignore[index]
    assert placed == sorted(good)
    full_cluster.kubectl(
        "rollout", "status", f"deployment/{name}", "-n", namespace, "--timeout=60s"
    )

    # A third replica does not fit anywhere: GPUs are exhausted on the matching nodes and the
    # other nodes fail the affinity. It must stay Pending, never land on the wrong nodes.
    full_cluster.kubectl("scale", f"deployment/{name}", "--replicas=3", "-n", namespace)

    def unschedulable() -> bool:
        items = full_cluster.kubectl_json("get", "pods", "-n", namespace, "-l", f"app={name}")[
            "items"
        ]
        pending = [p for p in items if not p["spec"].get("nodeName")]
        return bool(pending) and any(
            c.get("reason") == "Unschedulable"
            for p in pending
            for c in p["status"].get("conditions", [])
        )

    wait_for(unschedulable, timeout=60, what="third replica Unschedulable")
    nodes = {
        p["spec"].get("nodeName")
        for p in full_cluster.kubectl_json("get", "pods", "-n", namespace)["items"]
    }
    assert wrong_product not in nodes
    assert no_nvlink not in nodes


@pytest.mark.e2e
def test_helm_version_and_template(tmp_path: Path) -> None:
    helm = str(require_binaries(("helm",)) / "helm")
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(tmp_path / "helm-cache"),
        "HELM_CONFIG_HOME": str(tmp_path / "helm-config"),
        "HELM_DATA_HOME": str(tmp_path / "helm-data"),
    }

    def run(*args: str) -> str:
        return subprocess.run(
            [helm, *args], capture_output=True, text=True, check=True, timeout=30, env=env
        ).stdout

    version = run("version", "--short")
    assert version.startswith(("v3.", "v4.")), version
    assert "v3.x" not in version  # stamped with the real version at build time

    chart = tmp_path / "tiny"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        "apiVersion: v2\nname: tiny\nversion: 0.1.0\nkubeVersion: '>=1.30.0-0'\n"
    )
    (chart / "values.yaml").write_text("greeting: hello\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cm\n"
        "data:\n  greeting: {{ .Values.greeting | quote }}\n"
        "  kube: {{ .Capabilities.KubeVersion.Version | quote }}\n"
    )
    # kubeVersion >=1.30 only renders offline because the build stamps helm's default version.
    out = run("template", "demo", str(chart), "--set", "greeting=hi")
    assert "name: demo-cm" in out
    assert 'greeting: "hi"' in out
