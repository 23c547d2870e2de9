"""Regression: the operator starts and acts with more nodes than any kopf worker limit.

kopf runs no handler until every index is filled; a per-stream worker limit below the node
count once left the operator waiting forever at start with more than 64 nodes.
"""

from __future__ import annotations

import copy
import pathlib

import pytest
import yaml

from bench.cluster import build_nodes, create_nodes
from tests.k8s.cluster import ControlPlane, wait_for
from tests.k8s.operator import OperatorProcess
from tests.k8s.rest import Rest

REPO = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e
NODES = 150


def test_operator_starts_and_acts_with_150_nodes(
    full_cluster: ControlPlane, crds: ControlPlane, namespace: str, tmp_path: pathlib.Path
) -> None:
    nodes = build_nodes(NODES, 0.6, 3, 2)
    for node in nodes:
        node["metadata"]["name"] = f"{namespace[-6:]}-{node['metadata']['name']}"
        node["metadata"]["labels"]["pool"] = f"{namespace}-{node['metadata']['labels']['pool']}"
        node["metadata"]["labels"]["kubernetes.io/hostname"] = node["metadata"]["name"]
    create_nodes(full_cluster, nodes, threads=8)
    op = OperatorProcess(full_cluster, tmp_path).start()
    try:
        wait_for(
            lambda: op.metric("deepseek_operator_nodes") >= NODES,
            timeout=60,
            what=f"{NODES} nodes indexed",
        )
        doc = copy.deepcopy(yaml.safe_load((REPO / "examples/dsv41-flash-gb200.yaml").read_text()))
        doc["metadata"] = {"name": "dsv41", "namespace": namespace}
        doc["spec"]["nodeSelector"] = {"pool": f"{namespace}-gb200-0"}
        full_cluster.apply(doc)

        def resolved() -> bool:
            obj = full_cluster.kubectl_json("get", "dss", "dsv41", "-n", namespace)
            return (obj.get("status") or {}).get("resolved", {}).get(
                "moeBackend"
            ) == "deep_gemm_mega_moe"

        wait_for(resolved, timeout=60, what="decision with 150 nodes")
        eligible = full_cluster.kubectl_json("get", "dss", "dsv41", "-n", namespace)["status"][
            "resolved"
        ]["eligibleNodes"]
        assert eligible == 30  # 90 GB200 nodes over 3 pools
    finally:
        op.stop()
        rest = Rest(full_cluster)
        for node in nodes:
            rest.call("DELETE", f"/api/v1/nodes/{node['metadata']['name']}")
