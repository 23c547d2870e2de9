"""The Helm chart on a real control plane: install, the operator on the chart's RBAC, upgrade, uninstall.

``helm install`` puts the chart into a fresh namespace (its operator Deployment and agent
DaemonSet are only scheduled: kwok runs no containers, which does not matter here). Then the
operator runs as a local process with exactly the arguments of the chart's Deployment and a token
of the chart's own operator ServiceAccount, so the chart's ClusterRole is what gets tested: the
seed DeepSeekServing on two kwok GB200 nodes must reach ``BackendResolved=True``
(``deep_gemm_mega_moe``) and ``Ready=True`` with its pod Running on a GB200 node, while the
operator's log shows it reconciled the object and was never refused (no 403). ``helm upgrade``
with changed values rolls the new values out; ``helm uninstall`` leaves no object of the release
behind, cluster-scoped ones included, and leaves the CRDs (and the user's DeepSeekServing) in
place, because Helm never deletes what it installed from ``crds/``.

The session's admin ``operator`` fixture is not requested; if an earlier test started it, it may
act on this namespace too. Both compute the same result under the same field manager, so the
assertions hold either way; the log and metrics checks prove this module's operator did the work.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import time
import uuid
from typing import Any

import pytest
import yaml

from tests.gpu_nodes import HEALTHY_GB200_AGENT_LABELS, make_gpu_node
from tests.k8s.cluster import ControlPlane, wait_for
from tests.k8s.conditions import condition, wait_condition
from tests.k8s.operator import OperatorProcess, rbac_refusals
from tests.servings import serving

pytestmark = pytest.mark.e2e

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "deepseek-operator"
AGENT_OK = HEALTHY_GB200_AGENT_LABELS
CRD_NAMES = (
    "deepseekservings.serving.deepseek-operator.io",
    "clusterkopfpeerings.kopf.dev",
    "kopfpeerings.kopf.dev",
)
# Kinds the chart creates, as `kubectl get` names them; cluster-scoped ones marked.
RELEASE_KINDS = {
    "deployments.apps": False,
    "daemonsets.apps": False,
    "services": False,
    "serviceaccounts": False,
    "clusterroles.rbac.authorization.k8s.io": True,
    "clusterrolebindings.rbac.authorization.k8s.io": True,
    "validatingadmissionpolicies.admissionregistration.k8s.io": True,
    "validatingadmissionpolicybindings.admissionregistration.k8s.io": True,
    "clusterkopfpeerings.kopf.dev": True,
}


def helm(cp: ControlPlane, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(cp.bin_dir / "helm"), *args],
        capture_output=True,
        text=True,
        env=cp.env,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def manifest(cp: ControlPlane, release: str, namespace: str) -> list[dict[str, Any]]:
    out = helm(cp, "get", "manifest", release, "-n", namespace).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def find(docs: list[dict[str, Any]], kind: str, component: str) -> dict[str, Any]:
    return next(
        d
        for d in docs
        if d["kind"] == kind and d["metadata"]["labels"]["app.kubernetes.io/component"] == component
    )


def release_objects(cp: ControlPlane, release: str, namespace: str) -> list[str]:
    """Every object labelled with the release's instance label, cluster-scoped ones included."""
    found: list[str] = []
    for kind, cluster_scoped in RELEASE_KINDS.items():
        scope = [] if cluster_scoped else ["-n", namespace]
        out = cp.kubectl(
            "get", kind, *scope, "-l", f"app.kubernetes.io/instance={release}", "-o", "name"
        ).stdout
        found += out.split()
    return found


def gb200(name: str, pool: str) -> dict[str, Any]:
    return make_gpu_node(
        name, "NVIDIA-GB200", 4, (10, 0), agent_labels=AGENT_OK, extra_labels={"pool": pool}
    )


def log_records(op: OperatorProcess) -> list[dict[str, Any]]:
    records = []
    for line in op.log_path.read_text(errors="replace").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            records.append({"msg": line})
    return records


def test_chart_installs_runs_the_operator_on_its_rbac_upgrades_and_uninstalls_cleanly(
    full_cluster: ControlPlane, namespace: str, node_factory: Any, tmp_path: pathlib.Path
) -> None:
    cp = full_cluster
    release = f"dso-{uuid.uuid4().hex[:5]}"
    peering = (
        f"{release}-peering"  # cluster-scoped: unique, so the test can run twice on one cluster
    )
    timings: dict[str, float] = {}
    t0 = time.monotonic()

    # --- install --------------------------------------------------------------------------
    out = helm(
        cp,
        "install",
        release,
        str(CHART),
        "-n",
        namespace,
        "--set",
        f"operator.peering.name={peering}",
    ).stdout
    timings["install"] = time.monotonic() - t0
    assert "kubectl apply --server-side -f" in out, "NOTES tell how to upgrade the CRDs"
    for crd in CRD_NAMES:
        cp.wait_established(crd)
    docs = manifest(cp, release, namespace)
    deploy = find(docs, "Deployment", "operator")
    pod_spec = deploy["spec"]["template"]["spec"]
    args = pod_spec["containers"][0]["args"]
    assert args[0] == "run" and f"--peering={peering}" in args
    assert cp.kubectl("get", "clusterkopfpeering", peering, check=False).returncode == 0
    live = cp.kubectl_json("get", "deployment", deploy["metadata"]["name"], "-n", namespace)
    assert live["spec"]["replicas"] == 2
    agent_ds = find(docs, "DaemonSet", "agent")
    assert (
        cp.kubectl(
            "get", "daemonset", agent_ds["metadata"]["name"], "-n", namespace, check=False
        ).returncode
        == 0
    )
    for kind in ("validatingadmissionpolicy", "validatingadmissionpolicybinding"):
        assert (
            cp.kubectl(
                "get", kind, f"{release}-deepseek-operator-agent-node-fence", check=False
            ).returncode
            == 0
        )

    # --- the operator, with the chart's arguments and its ServiceAccount's token ----------
    token = cp.create_token(namespace, pod_spec["serviceAccountName"])
    kubeconfig = cp.kubeconfig_for_token(token, tmp_path / "kubeconfig", user="chart-operator")
    node_factory(gb200(f"{namespace}-gb0", namespace), gb200(f"{namespace}-gb1", namespace))
    t1 = time.monotonic()
    # OperatorProcess appends loopback health/metrics flags after these; argparse keeps the last.
    op = OperatorProcess(cp, tmp_path, kubeconfig=kubeconfig, extra=args[1:]).start()
    try:
        cp.apply(serving(namespace))

        obj = wait_condition(cp, namespace, "Ready", "True", timeout=120)
        timings["ready"] = time.monotonic() - t1
        backend = condition(obj, "BackendResolved")
        assert backend["status"] == "True" and backend["reason"] == "MegaMoESelected"
        assert obj["status"]["resolved"]["moeBackend"] == "deep_gemm_mega_moe"
        pods = cp.kubectl_json(
            "get", "pods", "-n", namespace, "-l", "app.kubernetes.io/instance=dsv41"
        )["items"]
        assert len(pods) == 1 and pods[0]["status"]["phase"] == "Running"
        assert pods[0]["spec"]["nodeName"] in {f"{namespace}-gb0", f"{namespace}-gb1"}

        # This operator did the work, and nothing it asked for was refused.
        records = log_records(op)
        assert any(
            r.get("msg") == "Reconciled DeepSeekServing" and r.get("namespace") == namespace
            for r in records
        ), op.logs()
        refused = rbac_refusals(json.dumps(r) for r in records)
        assert not refused, "the chart's RBAC refused the operator:\n" + "\n".join(refused[:10])
        events = cp.kubectl_json(
            "get",
            "events",
            "-n",
            namespace,
            "--field-selector",
            "involvedObject.kind=DeepSeekServing",
        )
        assert any("deep_gemm_mega_moe" in e.get("message", "") for e in events["items"]), (
            "Events were posted"
        )
        assert op.metric("deepseek_operator_reconciles_total", result="ok") >= 1
        assert op.metric("deepseek_operator_reconcile_errors_total") == 0
        # kopf peering through the chart's ClusterKopfPeering: this process registered in it.
        peers = cp.kubectl_json("get", "clusterkopfpeering", peering).get("status") or {}
        assert peers, "the operator did not register in the chart's peering object"
    finally:
        op.stop()

    # --- upgrade --------------------------------------------------------------------------
    t2 = time.monotonic()
    helm(
        cp,
        "upgrade",
        release,
        str(CHART),
        "-n",
        namespace,
        "--reuse-values",
        "--set",
        "operator.replicas=1",
        "--set",
        "metrics.port=9191",
        "--set",
        "agent.interval=60",
    )
    timings["upgrade"] = time.monotonic() - t2
    live = cp.kubectl_json("get", "deployment", deploy["metadata"]["name"], "-n", namespace)
    assert live["spec"]["replicas"] == 1
    container = live["spec"]["template"]["spec"]["containers"][0]
    assert (
        "--metrics-port=9191" in container["args"] and f"--peering={peering}" in container["args"]
    )
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["metrics"] == 9191
    live_ds = cp.kubectl_json("get", "daemonset", agent_ds["metadata"]["name"], "-n", namespace)
    assert "--interval=60" in live_ds["spec"]["template"]["spec"]["containers"][0]["args"]
    history = json.loads(helm(cp, "history", release, "-n", namespace, "-o", "json").stdout)
    assert [h["revision"] for h in history] == [1, 2] and history[-1]["status"] == "deployed"

    # --- uninstall ------------------------------------------------------------------------
    before = release_objects(cp, release, namespace)
    assert len(before) >= 12, before
    t3 = time.monotonic()
    helm(cp, "uninstall", release, "-n", namespace, "--wait", "--timeout", "120s")
    timings["uninstall"] = time.monotonic() - t3
    wait_for(
        lambda: release_objects(cp, release, namespace) == [],
        timeout=60,
        what="release objects deleted",
    )
    assert cp.kubectl("get", "clusterkopfpeering", peering, check=False).returncode != 0
    assert json.loads(helm(cp, "list", "-n", namespace, "-a", "-o", "json").stdout) == []
    # By Helm's design, CRDs from crds/ stay, and with them the user's DeepSeekServing and its children.
    for crd in CRD_NAMES:
        assert cp.kubectl("get", "crd", crd, check=False).returncode == 0, (
            f"{crd} must survive helm uninstall"
        )
    assert cp.kubectl("get", "dss", "dsv41", "-n", namespace, check=False).returncode == 0
    assert cp.kubectl("get", "deployment", "dsv41", "-n", namespace, check=False).returncode == 0
    print("helm e2e timings (s):", {k: round(v, 1) for k, v in timings.items()})
