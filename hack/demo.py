"""``make demo``: the whole product on a local control plane, in one command.

Builds (once) and starts etcd, kube-apiserver, controller-manager, scheduler and kwok; creates
fake GPU nodes (two healthy GB200 trays, one GB200 tray whose NVLink mesh the agent found
broken, two HGX H200 nodes); ``helm install``s the chart; runs the operator with the chart's own
ServiceAccount token; applies the example DeepSeekServings; prints ``kubectl get dss``, the
decision's checks and where the pods landed. ``--keep`` leaves everything running.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.gpu_nodes import HEALTHY_GB200_AGENT_LABELS, agent_labels, make_gpu_node
from tests.k8s.cluster import ControlPlane, default_bin_dir, wait_for
from tests.k8s.operator import OperatorProcess

REPO = Path(__file__).resolve().parents[1]

CHART = REPO / "charts" / "deepseek-operator"
RELEASE = "deepseek-operator"
OPERATOR_NS = "deepseek-operator"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def _say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def _nodes() -> list[dict[str, object]]:
    broken = agent_labels("NVIDIA-GB200", fully_connected="false")
    return [
        make_gpu_node("gb200-tray-0", agent_labels=HEALTHY_GB200_AGENT_LABELS, taints=[GPU_TAINT]),
        make_gpu_node("gb200-tray-1", agent_labels=HEALTHY_GB200_AGENT_LABELS, taints=[GPU_TAINT]),
        make_gpu_node("gb200-tray-2", agent_labels=broken, taints=[GPU_TAINT]),
        make_gpu_node(
            "h200-node-0",
            "NVIDIA-H200",
            8,
            (9, 0),
            agent_labels=agent_labels("NVIDIA-H200"),
            taints=[GPU_TAINT],
        ),
        make_gpu_node(
            "h200-node-1",
            "NVIDIA-H200",
            8,
            (9, 0),
            agent_labels=agent_labels("NVIDIA-H200"),
            taints=[GPU_TAINT],
        ),
    ]


def _print_checks(cp: ControlPlane, name: str) -> None:
    obj = cp.kubectl_json("get", "dss", name, "-n", "llm")
    status = obj.get("status") or {}
    decision = status.get("decision") or {}
    print(
        f"{name}: requested {decision.get('requested')} -> rendered {status['resolved']['moeBackend']} ({decision.get('reason')})"
    )
    for check in decision.get("checks", []):
        mark = "pass" if check["passed"] else "FAIL"
        print(f"  {check.get('rule', ''):<9} {check['name']:<28} {mark:<5} {check['message']}")
    for cond in status.get("conditions", []):
        print(
            f"  condition {cond['type']}={cond['status']} ({cond['reason']}): {cond['message'][:160]}"
        )


def main() -> int:
    """Run the demo; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keep", action="store_true", help="keep the cluster and operator running")
    args = parser.parse_args()

    _say("building the local control plane (cached after the first run)")
    subprocess.run([str(REPO / "hack/build-control-plane.sh")], check=True)
    work = Path(tempfile.mkdtemp(prefix="dso-demo-"))
    cp = ControlPlane(bin_dir=default_bin_dir(), work_dir=work)
    operator: OperatorProcess | None = None
    try:
        cp.start()
        cp.start_full()
        os.environ["KUBECONFIG"] = str(cp.kubeconfig)
        _say("fake GPU nodes (kwok): 3x GB200 tray (one with a broken NVLink mesh), 2x HGX H200")
        for node in _nodes():
            cp.create_node(node, wait_ready=True)
        print(
            cp.kubectl(
                "get",
                "nodes",
                "-L",
                "nvidia.com/gpu.product,gpu.deepseek-operator.io/nvlink.fully-connected",
            ).stdout
        )

        _say("helm install the chart")
        subprocess.run(
            [str(cp.bin_dir / "helm"), "install", RELEASE, str(CHART), "--namespace", OPERATOR_NS, "--create-namespace", "--wait=false"],
            check=True, env={**os.environ, **cp.env},
        )  # fmt: skip
        cp.kubectl(
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/deepseekservings.serving.deepseek-operator.io",
        )

        _say(
            "running the operator with the chart's ServiceAccount token (the chart's RBAC, not admin)"
        )
        token = cp.create_token(OPERATOR_NS, RELEASE)
        kubeconfig = cp.kubeconfig_for_token(token, work / "operator.kubeconfig", user=RELEASE)
        operator = OperatorProcess(
            cp, work, kubeconfig=kubeconfig, extra=["--peering", RELEASE]
        ).start()

        _say("kubectl apply the example DeepSeekServings")
        cp.kubectl("create", "namespace", "llm")
        for example in ("dsv41-flash-gb200.yaml", "dsv41-flash-dspark.yaml"):
            print(cp.kubectl("apply", "-f", str(REPO / "examples" / example)).stdout.strip())
        for name in ("dsv41", "dsv41-dspark"):
            wait_for(
                lambda n=name: any(c["type"] == "BackendResolved" for c in (cp.kubectl_json("get", "dss", n, "-n", "llm").get("status") or {}).get("conditions", [])),
                timeout=60, what=f"{name} resolved",
            )  # fmt: skip
        time.sleep(3)

        _say("kubectl get dss -n llm")
        print(cp.kubectl("get", "dss", "-n", "llm").stdout)
        _say("why: the checks behind each decision (status.decision.checks)")
        _print_checks(cp, "dsv41")
        print()
        _print_checks(cp, "dsv41-dspark")
        _say("where the pods landed")
        print(cp.kubectl("get", "pods", "-n", "llm", "-o", "wide").stdout)
        args_ = cp.kubectl_json("get", "deployment", "dsv41", "-n", "llm")["spec"]["template"][
            "spec"
        ]["containers"][0]["args"]
        print("dsv41 serves with: vllm serve " + " ".join(args_))
        if args.keep:
            _say(
                f"running; in another shell: export KUBECONFIG={cp.kubeconfig}  (Ctrl-C stops everything)"
            )
            while True:
                time.sleep(3600)
        return 0
    except KeyboardInterrupt:
        return 0
    except Exception as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        if operator is not None:
            print(operator.logs(40), file=sys.stderr)
        print(json.dumps({"logs": str(cp.log_dir)}), file=sys.stderr)
        return 1
    finally:
        if operator is not None:
            operator.stop()
        cp.stop()


if __name__ == "__main__":
    sys.exit(main())
