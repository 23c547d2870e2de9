"""The operator on a real control plane: decisions, placement, status, stability, restarts.

Each test owns a namespace and a pool of kwok GPU nodes labelled ``pool=<namespace>``; its
DeepSeekServing selects that pool, so tests sharing the session cluster do not see each other.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.gpu_nodes import HEALTHY_GB200_AGENT_LABELS, make_gpu_node
from tests.k8s.cluster import ControlPlane, wait_for
from tests.k8s.conditions import condition, wait_condition
from tests.k8s.operator import OperatorProcess, patch_serving
from tests.servings import serving

REPO = pathlib.Path(__file__).resolve().parents[2]
SEED = yaml.safe_load((REPO / "examples/dsv41-flash-gb200.yaml").read_text())
AGENT_OK = HEALTHY_GB200_AGENT_LABELS

pytestmark = pytest.mark.e2e


def _gb200(name: str, pool: str, **agent: str) -> dict[str, Any]:
    return make_gpu_node(
        name,
        "NVIDIA-GB200",
        4,
        (10, 0),
        agent_labels={**AGENT_OK, **agent},
        extra_labels={"pool": pool},
    )


def _h200(name: str, pool: str) -> dict[str, Any]:
    return make_gpu_node(
        name, "NVIDIA-H200", 8, (9, 0),
        agent_labels={"present": "true", "sm-family": "sm90", "cc": "9.0", "nvlink.fully-connected": "true"},
        extra_labels={"pool": pool},
    )  # fmt: skip


def _get(
    cp: ControlPlane, namespace: str, kind: str = "dss", name: str = "dsv41"
) -> dict[str, Any]:
    return dict(cp.kubectl_json("get", kind, name, "-n", namespace))


def _pods(cp: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    return list(
        cp.kubectl_json("get", "pods", "-n", namespace, "-l", "app.kubernetes.io/instance=dsv41")[
            "items"
        ]
    )


def _args(deploy: dict[str, Any]) -> list[str]:
    return list(deploy["spec"]["template"]["spec"]["containers"][0]["args"])


def test_seed_on_gb200_selects_mega_moe_schedules_and_becomes_ready(
    operator: OperatorProcess, full_cluster: ControlPlane, namespace: str, node_factory: Any
) -> None:
    node_factory(_gb200(f"{namespace}-gb0", namespace), _gb200(f"{namespace}-gb1", namespace))
    full_cluster.apply(serving(namespace))
    obj = wait_condition(full_cluster, namespace, "Ready", "True", timeout=90)
    assert obj["status"]["resolved"]["moeBackend"] == "deep_gemm_mega_moe"
    assert obj["status"]["resolved"]["sequenceParallel"] is True
    backend = condition(obj, "BackendResolved")
    assert backend["status"] == "True" and backend["reason"] == "MegaMoESelected"
    assert backend["observedGeneration"] == obj["metadata"]["generation"]
    assert condition(obj, "Placeable")["status"] == "True"
    deploy = _get(full_cluster, namespace, "deployment")
    args = _args(deploy)
    assert args[args.index("--moe-backend") + 1] == "deep_gemm_mega_moe"
    assert deploy["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    pods = _pods(full_cluster, namespace)
    assert len(pods) == 1 and pods[0]["status"]["phase"] == "Running"
    assert pods[0]["spec"]["nodeName"] in {f"{namespace}-gb0", f"{namespace}-gb1"}
    events = full_cluster.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", "involvedObject.kind=DeepSeekServing"
    )
    assert any("deep_gemm_mega_moe" in e.get("message", "") for e in events["items"])
    table = full_cluster.kubectl("get", "dss", "-n", namespace).stdout
    header, row = table.splitlines()[:2]
    assert header.split()[:4] == ["NAME", "BACKEND", "SP", "READY"]
    assert row.split()[1:4] == ["deep_gemm_mega_moe", "true", "True"]
    # REQUESTS: the requests at maxModelLen one replica holds, as the API server prints it.
    assert header.split()[5] == "REQUESTS"
    assert row.split()[5] == obj["status"]["capacity"][0]["concurrentRequests"]


def test_mixed_pool_lands_only_on_gb200(
    operator: OperatorProcess, full_cluster: ControlPlane, namespace: str, node_factory: Any
) -> None:
    node_factory(
        _h200(f"{namespace}-h0", namespace),
        _h200(f"{namespace}-h1", namespace),
        _gb200(f"{namespace}-gb0", namespace),
        _gb200(f"{namespace}-gb1", namespace),
    )
    full_cluster.apply(serving(namespace, replicas=2))
    obj = wait_condition(full_cluster, namespace, "Ready", "True", timeout=90)
    assert obj["status"]["resolved"]["moeBackend"] == "deep_gemm_mega_moe"
    nodes = {p["spec"]["nodeName"] for p in _pods(full_cluster, namespace)}
    assert nodes == {f"{namespace}-gb0", f"{namespace}-gb1"}


def test_h200_pool_keeps_auto_and_names_the_failed_check(
    operator: OperatorProcess, full_cluster: ControlPlane, namespace: str, node_factory: Any
) -> None:
    node_factory(_h200(f"{namespace}-h0", namespace))
    full_cluster.apply(serving(namespace))
    obj = wait_condition(full_cluster, namespace, "BackendResolved", "True")
    assert obj["status"]["resolved"]["moeBackend"] == "auto"
    assert obj["status"]["resolved"]["sequenceParallel"] is False
    assert obj["status"]["decision"]["reason"] == "GPUArchitectureFailed"
    assert condition(obj, "BackendResolved")["reason"] == "KeptAuto"
    assert "GPUArchitecture" in condition(obj, "BackendResolved")["message"]


def test_relabel_does_not_flip_or_restart_but_a_spec_change_rolls_out(
    operator: OperatorProcess, full_cluster: ControlPlane, namespace: str, node_factory: Any
) -> None:
    node_factory(_gb200(f"{namespace}-gb0", namespace), _gb200(f"{namespace}-gb1", namespace))
    full_cluster.apply(serving(namespace))
    wait_condition(full_cluster, namespace, "Ready", "True", timeout=90)
    pod = _pods(full_cluster, namespace)[0]
    host = pod["spec"]["nodeName"]
    other = ({f"{namespace}-gb0", f"{namespace}-gb1"} - {host}).pop()
    label = "gpu.deepseek-operator.io/nvlink.fully-connected=false"
    # The tray under the serving pod breaks; the other still holds the EP group.
    full_cluster.kubectl("label", "node", host, "--overwrite", label)
    obj = wait_condition(
        full_cluster,
        namespace,
        "BackendResolved",
        "True",
        check=lambda o: host in condition(o, "BackendResolved")["message"],
    )
    assert obj["status"]["resolved"]["moeBackend"] == "deep_gemm_mega_moe"
    # Now no tray is eligible: the serving decision is still kept (node churn never restarts it).
    full_cluster.kubectl("label", "node", other, "--overwrite", label)
    obj = wait_condition(
        full_cluster,
        namespace,
        "BackendResolved",
        "True",
        check=lambda o: "no eligible node is left" in condition(o, "BackendResolved")["message"],
    )
    assert obj["status"]["resolved"]["moeBackend"] == "deep_gemm_mega_moe"
    assert "kept" in condition(obj, "BackendResolved")["message"]
    assert [p["metadata"]["uid"] for p in _pods(full_cluster, namespace)] == [
        pod["metadata"]["uid"]
    ]
    assert "deep_gemm_mega_moe" in _args(_get(full_cluster, namespace, "deployment"))
    # Heal the pool, change the spec: a fresh decision and a rolling update.
    for node in (host, other):
        full_cluster.kubectl(
            "label",
            "node",
            node,
            "--overwrite",
            "gpu.deepseek-operator.io/nvlink.fully-connected=true",
        )
    patch_serving(full_cluster, namespace, {"spec": {"engine": {"maxNumSeqs": 32}}})
    obj = wait_condition(
        full_cluster, namespace, "Ready", "True", timeout=120,
        check=lambda o: o["status"]["observedGeneration"] == o["metadata"]["generation"] and o["status"]["resolved"]["moeBackend"] == "deep_gemm_mega_moe",
    )  # fmt: skip
    deploy = _get(full_cluster, namespace, "deployment")
    assert "32" in _args(deploy)
    wait_for(
        lambda: all(
            p["metadata"]["uid"] != pod["metadata"]["uid"] for p in _pods(full_cluster, namespace)
        ),
        timeout=60,
        what="rollout",
    )


def test_explicit_mega_on_hopper_is_pending_not_crashing_and_fixing_the_spec_clears_it(
    operator: OperatorProcess, full_cluster: ControlPlane, namespace: str, node_factory: Any
) -> None:
    node_factory(_h200(f"{namespace}-h0", namespace))
    full_cluster.apply(serving(namespace, moeBackend="deep_gemm_mega_moe"))
    obj = wait_condition(full_cluster, namespace, "BackendResolved", "False")
    message = condition(obj, "BackendResolved")["message"]
    assert "DeepGEMM MegaMoE requires SM100 GPUs." in message
    assert condition(obj, "Ready")["reason"] == "BackendUnrunnable"
    wait_for(lambda: len(_pods(full_cluster, namespace)) == 1, timeout=30, what="pod created")
    pods = _pods(full_cluster, namespace)
    assert pods[0]["status"]["phase"] == "Pending" and not pods[0]["spec"].get("nodeName")
    patch_serving(
        full_cluster,
        namespace,
        {"spec": {"moeBackend": "auto", "parallelism": {"tensorParallelSize": 8}}},
    )
    obj = wait_condition(full_cluster, namespace, "Ready", "True", timeout=90)
    assert condition(obj, "BackendResolved")["status"] == "True"


def test_children_are_restored_and_garbage_collected(
    operator: OperatorProcess, full_cluster: ControlPlane, namespace: str, node_factory: Any
) -> None:
    node_factory(_gb200(f"{namespace}-gb0", namespace))
    full_cluster.apply(serving(namespace))
    wait_condition(full_cluster, namespace, "BackendResolved", "True")
    wait_for(
        lambda: (
            full_cluster.kubectl("get", "svc", "dsv41-api", "-n", namespace, check=False).returncode
            == 0
        ),
        timeout=30,
        what="service",
    )
    full_cluster.kubectl("delete", "service", "dsv41-api", "-n", namespace)
    wait_for(
        lambda: (
            full_cluster.kubectl("get", "svc", "dsv41-api", "-n", namespace, check=False).returncode
            == 0
        ),
        timeout=30,
        what="service restored",
    )
    full_cluster.kubectl(
        "patch",
        "deployment",
        "dsv41",
        "-n",
        namespace,
        "--type=json",
        "-p",
        json.dumps(
            [
                {
                    "op": "replace",
                    "path": "/spec/template/spec/containers/0/args/0",
                    "value": "evil/model",
                }
            ]
        ),
    )
    wait_for(
        lambda: (
            _args(_get(full_cluster, namespace, "deployment"))[0] == SEED["spec"]["model"]["name"]
        ),
        timeout=30,
        what="hand edit reverted",
    )
    full_cluster.kubectl("delete", "dss", "dsv41", "-n", namespace)
    wait_for(
        lambda: (
            full_cluster.kubectl(
                "get", "deployment,svc", "-n", namespace, "-o", "name"
            ).stdout.strip()
            == ""
        ),
        timeout=60,
        what="garbage collection",
    )


def test_operator_restart_leaves_no_duplicate_or_lost_children(
    full_cluster: ControlPlane,
    crds: ControlPlane,
    operator: OperatorProcess,
    namespace: str,
    node_factory: Any,
    tmp_path: pathlib.Path,
) -> None:
    node_factory(_gb200(f"{namespace}-gb0", namespace))
    operator.stop(kill=True)
    try:
        full_cluster.apply(serving(namespace))
        second = OperatorProcess(full_cluster, tmp_path).start()
        try:
            wait_condition(full_cluster, namespace, "Ready", "True", timeout=90)
            second.stop(kill=True)  # mid-flight: children exist, status may be half-written
            third = OperatorProcess(full_cluster, tmp_path).start()
            try:
                obj = wait_condition(full_cluster, namespace, "Ready", "True", timeout=60)
                assert obj["status"]["resolved"]["moeBackend"] == "deep_gemm_mega_moe"
                names = full_cluster.kubectl(
                    "get", "deployment,svc,statefulset", "-n", namespace, "-o", "name"
                ).stdout.split()
                assert sorted(names) == ["deployment.apps/dsv41", "service/dsv41-api"]
                assert len(_pods(full_cluster, namespace)) == 1
            finally:
                third.stop()
        finally:
            second.stop()
    finally:
        operator.start()


def test_only_placeable_replicas_plus_the_queue_are_created_and_more_nodes_let_more_in(
    operator: OperatorProcess, full_cluster: ControlPlane, namespace: str, node_factory: Any
) -> None:
    # 50 replicas on 4 trays (one 4-GPU pod each): the Deployment asks for 4 + 1 queued, not 50.
    node_factory(*(_gb200(f"{namespace}-gb{i}", namespace) for i in range(4)))
    full_cluster.apply(serving(namespace, replicas=50))

    def workload_replicas() -> int:
        return int(_get(full_cluster, namespace, "deployment")["spec"]["replicas"])

    def held_back(text: str) -> Callable[[dict[str, Any]], bool]:
        return lambda o: text in condition(o, "Placeable")["message"]

    obj = wait_condition(
        full_cluster, namespace, "Placeable", "False", timeout=90,
        check=held_back("45 of 50 replicas held back: the workload asks for 5 (4 placeable + spec.maxPendingReplicas 1 allowed to pend)"),
    )  # fmt: skip
    assert obj["status"]["replicas"] == 50
    assert workload_replicas() == 5
    wait_for(
        lambda: (
            sorted(p["status"].get("phase") for p in _pods(full_cluster, namespace))
            == ["Pending"] + ["Running"] * 4
        ),
        timeout=90,
        what="4 Running pods and 1 Pending (the queue)",
    )
    # Two more trays: two more replicas are let in, still one queued.
    added = [f"{namespace}-gb4", f"{namespace}-gb5"]
    node_factory(*(_gb200(name, namespace) for name in added))
    wait_condition(
        full_cluster, namespace, "Placeable", "False", timeout=60,
        check=held_back("43 of 50 replicas held back: the workload asks for 7"),
    )  # fmt: skip
    assert workload_replicas() == 7
    # The trays go again: capacity shrank, but the workload never shrinks for it.
    for name in added:
        full_cluster.delete_node(name)
    wait_condition(
        full_cluster, namespace, "Placeable", "False", timeout=60,
        check=held_back("43 of 50 replicas held back: the workload keeps its current 7"),
    )  # fmt: skip
    assert workload_replicas() == 7
    # Lowering spec.replicas is the way down.
    patch_serving(full_cluster, namespace, {"spec": {"replicas": 3}})
    wait_for(lambda: workload_replicas() == 3, timeout=60, what="workload scaled to 3")
