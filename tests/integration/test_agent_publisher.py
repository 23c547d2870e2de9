"""The node agent's publisher and its admission fence against the real kube-apiserver.

Publisher: writes only keys under gpu.deepseek-operator.io/, only when they change (the Node's
resourceVersion stays put on a no-op publish), removes stale keys of ours and leaves everyone
else's labels and annotations alone. Admission policy (deploy/agent-admission-policy.yaml):
with a ServiceAccount token bound to a Pod on Node A, the agent may patch our keys on A and
nothing else — not another Node, not a foreign label or annotation, not the spec.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from deepseek_operator import names
from deepseek_operator.agent.gpu_topology import GpuTopology
from deepseek_operator.agent.main import desired_state
from deepseek_operator.agent.publisher import MERGE_PATCH, Backoff, NodePublisher, PublishError
from deepseek_operator.agent.topo_smi import parse_topo
from tests.gpu_nodes import make_gpu_node
from tests.k8s.cluster import ControlPlane, free_port, unique_name, wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOPO = REPO / "tests" / "fixtures" / "topo"
POLICY = REPO / "deploy" / "agent-admission-policy.yaml"
RBAC = REPO / "deploy" / "agent-rbac.yaml"
P = names.AGENT_PREFIX


def capture(name: str) -> GpuTopology:
    return parse_topo((TOPO / f"{name}.txt").read_text())


def node_of(control_plane: ControlPlane, name: str) -> dict[str, Any]:
    node: dict[str, Any] = control_plane.kubectl_json("get", "node", name)
    return node


def split(values: dict[str, str] | None) -> tuple[dict[str, str], dict[str, str]]:
    values = values or {}
    ours = {k: v for k, v in values.items() if k.startswith(P)}
    return ours, {k: v for k, v in values.items() if not k.startswith(P)}


# --- the publisher ---------------------------------------------------------------------------


def test_publisher_writes_only_our_keys_only_on_change_and_drops_stale_ones(
    control_plane: ControlPlane, node_factory: Any
) -> None:
    name = unique_name("agent-pub")
    node_factory(
        make_gpu_node(
            name,
            product="NVIDIA-H100-80GB-HBM3",
            count=4,
            cc=(9, 0),
            agent_labels={"mnnvl.clique": "stale.1", "nvlink.links": "12"},
            extra_labels={"team": "inference"},
            annotations={"example.com/owner": "someone-else", P + "old-annotation": "x"},
        )
    )
    before = node_of(control_plane, name)["metadata"]
    _, foreign_labels = split(before["labels"])
    _, foreign_annotations = split(before["annotations"])

    with control_plane.api_client() as api:
        publisher = NodePublisher(client.CoreV1Api(api), name, max_attempts=3)
        labels, annotations = desired_state(capture("t09-h100-direct-nv6"))
        first = publisher.publish(labels, annotations)
        after = node_of(control_plane, name)["metadata"]
        second = publisher.publish(labels, annotations)
        again = node_of(control_plane, name)["metadata"]

        assert first.changed
        ours, foreign = split(after["labels"])
        assert ours == labels  # stale mnnvl.clique and nvlink.links are gone
        assert foreign == foreign_labels
        ours_ann, foreign_ann = split(after["annotations"])
        assert ours_ann == annotations  # the stale annotation of ours is gone
        assert foreign_ann == foreign_annotations
        assert json.loads(ours_ann[names.AGENT_TOPOLOGY_ANNOTATION])["v"] == 1

        assert not second.changed
        assert again["resourceVersion"] == after["resourceVersion"]

        # The fabric degrades: only the changed keys are sent, the rest is kept.
        degraded_labels, degraded_annotations = desired_state(capture("t07-b200-degraded-nvlink"))
        third = publisher.publish(degraded_labels, degraded_annotations)
        assert third.changed
        final = node_of(control_plane, name)["metadata"]
        assert final["labels"][names.AGENT_NVLINK_FULLY_CONNECTED] == "false"
        assert final["labels"][names.AGENT_NVLINK_DOMAIN_SIZE] == "7"
        assert split(final["labels"])[1] == foreign_labels
        assert final["resourceVersion"] != after["resourceVersion"]

        # GPUs gone (driver unloaded): present=false, annotation removed, nothing else of ours.
        no_gpu_labels, no_gpu_annotations = desired_state(GpuTopology(unavailable_reason="x"))
        publisher.publish(no_gpu_labels, no_gpu_annotations)
        empty = node_of(control_plane, name)["metadata"]
        assert split(empty["labels"]) == ({names.AGENT_PRESENT: "false"}, foreign_labels)
        assert split(empty["annotations"]) == ({}, foreign_annotations)


def test_agent_command_once_publishes_a_recording_through_a_kubeconfig(
    control_plane: ControlPlane, node_factory: Any
) -> None:
    name = unique_name("agent-cli")
    node_factory(make_gpu_node(name))
    proc = subprocess.run(
        [
            sys.executable, "-m", "deepseek_operator.cli", "agent", "--once",
            "--node-name", name, "--kubeconfig", str(control_plane.kubeconfig),
            "--recorded", str(TOPO / "t05-gb200-tray.txt"),
        ],
        capture_output=True, text=True, timeout=60, env=control_plane.env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert 'msg="Published GPU topology on Node"' in proc.stderr
    labels = node_of(control_plane, name)["metadata"]["labels"]
    assert labels[names.AGENT_PRODUCT] == "NVIDIA-GB200"
    assert labels[names.AGENT_NVLINK_FULLY_CONNECTED] == "true"


def test_an_unreachable_api_server_is_retried_then_given_up() -> None:
    cfg = client.Configuration()
    cfg.host = f"https://127.0.0.1:{free_port()}"  # nothing listens here
    cfg.verify_ssl = False
    cfg.retries = 0
    sleeps: list[float] = []
    with client.ApiClient(cfg) as api:
        publisher = NodePublisher(
            client.CoreV1Api(api),
            "nowhere",
            max_attempts=4,
            sleep=sleeps.append,
            backoff=Backoff(initial=0.5, cap=2.0, jitter=0.0),
        )
        with pytest.raises(PublishError, match="after 4 attempts"):
            publisher.publish({P + "present": "true"}, {})
    assert sleeps == [0.5, 1.0, 2.0]


# --- the admission policy --------------------------------------------------------------------


def fenced_manifests(namespace: str, suffix: str) -> tuple[str, str]:
    """The deploy/ YAML with the documented parameters set for this test's namespace."""
    policy = POLICY.read_text().replace(
        "system:serviceaccount:deepseek-operator:deepseek-operator-agent",
        f"system:serviceaccount:{namespace}:deepseek-operator-agent",
    )
    policy = policy.replace(
        "deepseek-operator-agent-node-fence", f"deepseek-operator-agent-node-fence-{suffix}"
    )
    rbac = RBAC.read_text().replace("namespace: deepseek-operator\n", f"namespace: {namespace}\n")
    rbac = rbac.replace(
        "name: deepseek-operator-agent\n  labels", f"name: dso-agent-{suffix}\n  labels"
    )
    rbac = rbac.replace(
        "  kind: ClusterRole\n  name: deepseek-operator-agent\n",
        f"  kind: ClusterRole\n  name: dso-agent-{suffix}\n",
    )
    return policy, rbac


def patch(core: client.CoreV1Api, node: str, metadata: dict[str, Any]) -> Any:
    return core.patch_node(node, {"metadata": metadata}, _content_type=MERGE_PATCH)


def denied(call: Any) -> str:
    with pytest.raises(ApiException) as info:
        call()
    assert info.value.status in (403, 422), info.value
    return str(info.value.body)


def test_admission_policy_confines_the_agent_to_its_own_node_and_prefix(
    control_plane: ControlPlane, namespace: str, node_factory: Any
) -> None:
    suffix = namespace[-6:]
    own, other = unique_name("agent-own"), unique_name("agent-other")
    node_factory(make_gpu_node(own), make_gpu_node(other))
    policy, rbac = fenced_manifests(namespace, suffix)
    control_plane.apply(rbac)  # the ServiceAccount, its ClusterRole and binding
    control_plane.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "agent", "namespace": namespace},
            "spec": {
                "serviceAccountName": "deepseek-operator-agent",
                "nodeName": own,
                "containers": [{"name": "agent", "image": "example.invalid/agent:test"}],
            },
        }
    )
    token = control_plane.create_token(
        namespace, "deepseek-operator-agent", bound_object=("Pod", "agent")
    )
    policy_names = [f"deepseek-operator-agent-node-fence-{suffix}"]
    try:
        with control_plane.api_client(token) as api:
            core = client.CoreV1Api(api)
            # Without the fence, RBAC alone lets the agent label any Node.
            patch(core, other, {"labels": {"unfenced": "yes"}})

            control_plane.apply(policy)

            def fenced() -> bool:
                try:
                    patch(core, other, {"labels": {P + "probe": "x"}})
                except ApiException as exc:
                    return exc.status in (403, 422)
                return False

            wait_for(fenced, timeout=30, what="the agent admission policy to take effect")

            if control_plane.full:
                # The status (type checking) is written by kube-controller-manager, which only
                # the full cluster runs. Without it, the allowed patch below still proves every
                # expression compiles: with failurePolicy Fail a broken one would deny it.
                def checked() -> dict[str, Any] | None:
                    vap = control_plane.kubectl_json(
                        "get", "validatingadmissionpolicy", policy_names[0]
                    )
                    status: dict[str, Any] = vap.get("status", {})
                    done = status.get("observedGeneration") == vap["metadata"]["generation"]
                    return status if done else None

                status = wait_for(checked, timeout=30, what="the policy's type checking")
                # Every CEL expression type-checks (no warnings), so none fails at request time.
                assert not status.get("typeChecking", {}).get("expressionWarnings"), status

            # Allowed: our keys, on its own Node, through the real publisher.
            publisher = NodePublisher(core, own, max_attempts=1)
            labels, annotations = desired_state(capture("t01-hgx-h100-nvswitch"))
            assert publisher.publish(labels, annotations).changed
            assert node_of(control_plane, own)["metadata"]["labels"][names.AGENT_COUNT] == "8"
            patch(core, own, {"labels": {names.AGENT_MIG: None}})  # removing ours is fine too

            # Denied: a label outside our prefix on its own Node.
            body = denied(lambda: patch(core, own, {"labels": {"node-role.kubernetes.io/x": ""}}))
            assert "may only change labels under gpu.deepseek-operator.io/" in body
            # Denied: removing someone else's label.
            denied(lambda: patch(core, own, {"labels": {"nvidia.com/gpu.product": None}}))
            # Denied: an annotation outside our prefix.
            body = denied(lambda: patch(core, own, {"annotations": {"example.com/x": "1"}}))
            assert "may only change annotations under" in body
            # Denied: the spec (taints) of its own Node.
            denied(
                lambda: core.patch_node(
                    own, {"spec": {"unschedulable": True}}, _content_type=MERGE_PATCH
                )
            )
            # Denied: our own key on another Node, also through the publisher.
            body = denied(lambda: patch(core, other, {"labels": {P + "present": "true"}}))
            assert f"may only change its own Node, not {other}" in body
            with pytest.raises(PublishError, match=r"HTTP 40[3]|HTTP 422"):
                NodePublisher(core, other, max_attempts=1).publish(labels, annotations)
            # Denied: deleting a Node (RBAC refuses it first; either way it must not pass).
            denied(lambda: core.delete_node(other))

        # The admin is not the agent: the policy does not get in its way.
        control_plane.kubectl("label", "node", own, "team=inference")
        assert node_of(control_plane, own)["metadata"]["labels"]["team"] == "inference"
    finally:
        for name in policy_names:
            control_plane.kubectl(
                "delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name,
                "--ignore-not-found", check=False,
            )  # fmt: skip
        control_plane.kubectl(
            "delete", "clusterrolebinding,clusterrole", f"dso-agent-{suffix}",
            "--ignore-not-found", check=False,
        )  # fmt: skip
