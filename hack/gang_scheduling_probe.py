"""Kubernetes 1.36 alpha gang scheduling on this project's control plane: a probe, not a test.

Why it exists: a LeaderWorkerSet group is placed leader first (docs/limits.md). This probe shows,
on the pinned binaries (~/.cache/deepseek-operator/bin, `make cluster-bins`), what the alpha
Workload-aware scheduling of Kubernetes v1.36 would change. It starts etcd, kube-apiserver (with
`GenericWorkload`, `GangScheduling`, `TopologyAwareWorkloadScheduling` and
`scheduling.k8s.io/v1alpha2`), kube-scheduler (same gates), kube-controller-manager and kwok, with
three kwok GB200 trays: one free in rack A, two in rack B; every pod asks for a whole tray.

1. Today's shape (what LWS makes): a leader pod, then a worker with required pod affinity to it on
   the clique label. The leader is steered to rack A, as the scheduler may do: the worker stays
   Pending ("didn't match pod affinity rules").
2. A `PodGroup` with a gang policy (minCount 2) and a topology constraint on the clique label, two
   pods naming it in `spec.schedulingGroup.podGroupName`: both land in rack B at once.
3. A second such gang when no clique has two free trays: neither pod is placed (no half-placed
   group), and the PodGroup says `PodGroupScheduled=False`, reason `Unschedulable`.

Usage: .venv/bin/python -m hack.gang_scheduling_probe   (about 40 s; prints what it saw)
"""

from __future__ import annotations

import pathlib
import sys
import tempfile
import time
from typing import Any

from tests.k8s import cluster
from tests.k8s.cluster import ControlPlane, wait_for
from tests.racks import GFD_CLIQUE, RACK_A, RACK_B, make_gb200_tray

ROOT = pathlib.Path(__file__).resolve().parents[1]

GATES = "GenericWorkload=true,GangScheduling=true,TopologyAwareWorkloadScheduling=true"
_Component = cluster.Component


def _gated_component(name: str, args: list[str], *rest: Any, **kwargs: Any) -> Any:
    """The control plane's components, the API server and scheduler with the alpha gates on."""
    if name == "kube-apiserver":
        args = [
            *args,
            f"--feature-gates={GATES}",
            "--runtime-config=scheduling.k8s.io/v1alpha2=true",
        ]
    elif name == "kube-scheduler":
        args = [*args, f"--feature-gates={GATES}"]
    return _Component(name, args, *rest, **kwargs)


def _pod(name: str, group: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"group": group}},
        "spec": {
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "4"}}}
            ],
            "tolerations": [{"operator": "Exists"}],
            **spec,
        },
    }


def _gang(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 2}},
            "schedulingConstraints": {"topology": [{"key": GFD_CLIQUE}]},
        },
    }


def main() -> int:
    """Run the three cases and print where every pod went."""
    cluster.Component = _gated_component  # type: ignore[misc]
    with tempfile.TemporaryDirectory(prefix="dso-gang-") as work:
        bins = pathlib.Path.home() / ".cache/deepseek-operator/bin"
        cp = ControlPlane(bin_dir=bins, work_dir=pathlib.Path(work))
        cp.start()
        try:
            cp.start_full()
            for node in (
                make_gb200_tray("a0", RACK_A),
                make_gb200_tray("b0", RACK_B),
                make_gb200_tray("b1", RACK_B),
            ):
                cp.create_node(node)

            def node_of(*pods: str) -> dict[str, str]:
                return {
                    p: cp.kubectl_json("get", "pod", p)["spec"].get("nodeName") or "Pending"
                    for p in pods
                }

            def create(obj: dict[str, Any]) -> None:
                cp.kubectl("create", "-f", "-", input=obj)

            # 1. Leader first, the worker tied to the leader's clique.
            create(_pod("lws-0", "lws", nodeSelector={GFD_CLIQUE: RACK_A.key}))
            wait_for(lambda: node_of("lws-0")["lws-0"] != "Pending", timeout=60, what="leader")
            affinity = {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"group": "lws"}},
                            "topologyKey": GFD_CLIQUE,
                        }
                    ]
                }
            }
            create(_pod("lws-0-1", "lws", affinity=affinity))
            time.sleep(8)
            print("leader first:", node_of("lws-0", "lws-0-1"))
            events = cp.kubectl(
                "get", "events", "--field-selector=involvedObject.name=lws-0-1",
                "-o", "jsonpath={.items[*].message}",
            ).stdout  # fmt: skip
            print("  worker:", events.split(" preemption:")[0])
            cp.kubectl("delete", "pod", "lws-0", "lws-0-1", "--grace-period=0", "--force")
            time.sleep(3)

            # 2. A gang of two, one clique: placed together where both fit.
            create(_gang("g0"))
            for pod in ("g0-0", "g0-1"):
                create(_pod(pod, "g0", schedulingGroup={"podGroupName": "g0"}))
            wait_for(
                lambda: "Pending" not in node_of("g0-0", "g0-1").values(), timeout=60, what="g0"
            )
            print("gang g0:", node_of("g0-0", "g0-1"))

            # 3. No clique has room for a second gang: nothing placed.
            create(_gang("g1"))
            for pod in ("g1-0", "g1-1"):
                create(_pod(pod, "g1", schedulingGroup={"podGroupName": "g1"}))
            time.sleep(10)
            print("gang g1:", node_of("g1-0", "g1-1"))
            for group in cp.kubectl_json("get", "podgroups")["items"]:
                for cond in (group.get("status") or {}).get("conditions") or []:
                    print(
                        f"  PodGroup {group['metadata']['name']}: {cond['type']}={cond['status']} "
                        f"{cond.get('reason', '')}: {cond.get('message', '')}"
                    )
        finally:
            cp.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
