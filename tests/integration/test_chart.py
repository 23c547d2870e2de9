"""``helm lint`` and ``helm template`` of the chart with the built helm (no cluster needed).

Renders the chart with its defaults and with each ``ci/*-values.yaml`` and checks the properties
the chart promises: hardened pods, least-privilege RBAC without wildcards, the agent on GPU nodes
only and not privileged, peering wired to the operator's arguments, the admission policy naming
the agent's own ServiceAccount, and the CRDs shipped in ``crds/``.
"""

from __future__ import annotations

import pathlib
import subprocess
from typing import Any

import pytest
import yaml

from tests.k8s.cluster import require_binaries

pytestmark = pytest.mark.integration

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "deepseek-operator"
CI_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
KUBE_VERSION = "1.36.3"
NAMESPACE = "dso-system"


@pytest.fixture(scope="module")
def helm() -> str:
    return str(require_binaries(("helm",)) / "helm")


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=120, check=False)


def render(helm: str, *values: pathlib.Path, extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    args = [
        "template",
        "dso",
        str(CHART),
        "-n",
        NAMESPACE,
        "--kube-version",
        KUBE_VERSION,
        "--include-crds",
    ]
    for path in values:
        args += ["-f", str(path)]
    proc = run_helm(helm, *args, *extra)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str, component: str | None = None) -> dict[str, Any]:
    found = [
        d
        for d in by_kind(docs, kind)
        if component is None
        or d["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]
    assert len(found) == 1, f"{len(found)} {kind} objects for {component}"
    return found[0]


@pytest.mark.parametrize("values", [None, *CI_FILES], ids=lambda p: p.name if p else "defaults")
def test_helm_lint(helm: str, values: pathlib.Path | None) -> None:
    args = ["lint", str(CHART), "--strict", "--kube-version", KUBE_VERSION]
    if values is not None:
        args += ["-f", str(values)]
    proc = run_helm(helm, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_chart_requires_kubernetes_1_30(helm: str) -> None:
    proc = run_helm(helm, "template", "dso", str(CHART), "--kube-version", "1.29.9")
    assert proc.returncode != 0 and ">=1.30.0-0" in proc.stderr


def test_schema_rejects_a_misspelt_value(helm: str) -> None:
    proc = run_helm(
        helm,
        "template",
        "dso",
        str(CHART),
        "--kube-version",
        KUBE_VERSION,
        "--set",
        "operator.replica=3",
    )
    assert proc.returncode != 0 and "replica" in proc.stderr


def _assert_hardened(pod: dict[str, Any]) -> None:
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    for container in pod["containers"]:
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add")
        assert not sc.get("privileged")
        assert sc["seccompProfile"]["type"] == "RuntimeDefault"
        assert any(m["mountPath"] == "/tmp" for m in container["volumeMounts"])


@pytest.mark.parametrize("values", [None, *CI_FILES], ids=lambda p: p.name if p else "defaults")
def test_rendered_objects_keep_the_charts_promises(helm: str, values: pathlib.Path | None) -> None:
    docs = render(helm, *([values] if values else []))
    config = yaml.safe_load(values.read_text()) if values else {}
    # CRDs come along (crds/), exactly the top-level ones.
    crds = {d["metadata"]["name"] for d in by_kind(docs, "CustomResourceDefinition")}
    assert crds == {
        "deepseekservings.serving.deepseek-operator.io",
        "clusterkopfpeerings.kopf.dev",
        "kopfpeerings.kopf.dev",
    }
    # No object lands outside the release namespace except the cluster-scoped ones.
    cluster_scoped = {
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "ClusterKopfPeering",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    watch = config.get("operator", {}).get("watchNamespaces", [])
    for doc in docs:
        if doc["kind"] in cluster_scoped:
            assert "namespace" not in doc["metadata"]
        elif doc["kind"] in ("KopfPeering", "Role", "RoleBinding"):
            assert doc["metadata"]["namespace"] in watch
        else:
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["kind"]

    # The operator Deployment.
    deploy = one(docs, "Deployment", "operator")
    pod = deploy["spec"]["template"]["spec"]
    _assert_hardened(pod)
    container = pod["containers"][0]
    args = container["args"]
    assert args[0] == "run" and "--standalone" not in args
    peering = next(a.split("=", 1)[1] for a in args if a.startswith("--peering="))
    metrics_port = config.get("metrics", {}).get("port", 9090)
    assert f"--metrics-port={metrics_port}" in args and "--health-port=8080" in args
    assert [a.split("=", 1)[1] for a in args if a.startswith("--namespace=")] == watch
    # The router image of servings without spec.router.image: the chart's routerImage.
    router_image = config.get("routerImage", {})
    expected = router_image.get("repository", "deepseek-operator-router") + (
        f"@{router_image['digest']}"
        if router_image.get("digest")
        else f":{router_image.get('tag', '0.1.17')}"
    )
    assert f"--router-image={expected}" in args
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8080, "metrics": metrics_port}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {
        "name": "POD_NAME",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
    } in container["env"]
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert deploy["spec"]["replicas"] == config.get("operator", {}).get("replicas", 2)
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0][
        "podAffinityTerm"
    ]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]
    # Peering: the object the operator's --peering names exists in the mode it runs in.
    if watch:
        assert sorted(
            d["metadata"]["namespace"]
            for d in by_kind(docs, "KopfPeering")
            if d["metadata"]["name"] == peering
        ) == sorted(watch)
        assert not by_kind(docs, "ClusterKopfPeering")
    else:
        assert [d["metadata"]["name"] for d in by_kind(docs, "ClusterKopfPeering")] == [peering]

    # Operator RBAC: bound to the Deployment's ServiceAccount, no wildcard, no secrets.
    role = one(docs, "ClusterRole", "operator")
    binding = one(docs, "ClusterRoleBinding", "operator")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": NAMESPACE}
    ]
    assert one(docs, "ServiceAccount", "operator")["metadata"]["name"] == pod["serviceAccountName"]
    # Watching some namespaces: the ClusterRole only reads cluster-scoped things (and marks the
    # operator's own Kueue AdmissionChecks Active: their status is its one cluster-scoped write),
    # every other write right is a Role in exactly the watched namespaces, bound to the same
    # ServiceAccount.
    roles = by_kind(docs, "Role")
    cluster_resources = {r for rule in role["rules"] for r in rule["resources"]}
    if watch:
        assert cluster_resources == {
            "nodes",
            "resourceslices",
            "resourceclaims",
            "customresourcedefinitions",
            "namespaces",
            "admissionchecks",
            "admissionchecks/status",
        }
        assert all(
            set(rule["verbs"]) <= {"get", "list", "watch"}
            for rule in role["rules"]
            if rule["resources"] != ["admissionchecks/status"]
        )
        assert sorted(r["metadata"]["namespace"] for r in roles) == sorted(watch)
        bindings = by_kind(docs, "RoleBinding")
        assert sorted(b["metadata"]["namespace"] for b in bindings) == sorted(watch)
        for b in bindings:
            assert b["subjects"] == binding["subjects"]
            assert b["roleRef"]["kind"] == "Role"
        namespaced = {r for rule in roles[0]["rules"] for r in rule["resources"]}
        assert {"deployments", "leaderworkersets", "services", "kopfpeerings", "pods"} <= namespaced
        assert "clusterkopfpeerings" not in namespaced
    else:
        assert roles == [] and by_kind(docs, "RoleBinding") == []
        assert {"deployments", "clusterkopfpeerings", "nodes"} <= cluster_resources
    for rule in role["rules"] + [rule for r in roles for rule in r["rules"]]:
        for key in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[key] and not any("*" in item for item in rule[key]), rule
        assert "secrets" not in rule["resources"]
        if "pods" in rule["resources"]:  # status.groups: read our LWS pods, never write one
            # get: held (never called) so the operator may write the router's pods-read Role.
            assert rule["resources"] == ["pods"] and set(rule["verbs"]) == {"get", "list", "watch"}
        if "roles" in rule["resources"] or "rolebindings" in rule["resources"]:
            # The router's Role and binding: never escalate or bind (the operator holds the
            # rights it grants instead).
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule
        if "nodes" in rule["resources"] or "resourceslices" in rule["resources"]:
            assert set(rule["verbs"]) == {"get", "list", "watch"}
        if "admissionchecks" in rule["resources"]:  # Kueue's: read only
            assert set(rule["verbs"]) == {"get", "list", "watch"}
        if "admissionchecks/status" in rule["resources"] or "workloads/status" in rule["resources"]:
            assert set(rule["verbs"]) == {"patch"}, rule  # the operator's own check entry only
        if "resourceclaims" in rule["resources"]:  # free DRA devices: read claims, never write
            assert rule["resources"] == ["resourceclaims"]
            assert set(rule["verbs"]) == {"list", "watch"}

    # The serving admission policy: the requesting user's own rights, on by default.
    serving_policy = one(docs, "ValidatingAdmissionPolicy", "admission")
    rights = " ".join(v["expression"] for v in serving_policy["spec"]["variables"]) + " ".join(
        v["expression"] for v in serving_policy["spec"]["validations"]
    )
    for needed in ("'pods'", "'secrets'", "'configmaps'", "'persistentvolumeclaims'"):
        assert needed in rights
    assert one(docs, "ValidatingAdmissionPolicyBinding", "admission")["spec"][
        "validationActions"
    ] == ["Deny"]

    # Metrics Service / ServiceMonitor.
    services = by_kind(docs, "Service")
    if config.get("metrics", {}).get("service", {}).get("enabled", True):
        assert services[0]["spec"]["ports"][0]["targetPort"] == "metrics"
        assert services[0]["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    else:
        assert services == []
    monitors = by_kind(docs, "ServiceMonitor")
    assert len(monitors) == int(
        config.get("metrics", {}).get("serviceMonitor", {}).get("enabled", False)
    )

    # The agent.
    agent_on = config.get("agent", {}).get("enabled", True)
    daemonsets = by_kind(docs, "DaemonSet")
    if not agent_on:
        assert daemonsets == []
        assert not [
            d
            for d in docs
            if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "agent"
        ]
        return
    ds = daemonsets[0]
    apod = ds["spec"]["template"]["spec"]
    _assert_hardened(apod)
    assert apod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in apod[
        "tolerations"
    ]
    acontainer = apod["containers"][0]
    assert acontainer["args"][0] == "agent"
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in acontainer["env"]}
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert "nvidia.com/gpu" not in str(acontainer["resources"]), "the agent requests no GPU"
    assert apod.get("runtimeClassName") == (config.get("agent", {}).get("runtimeClassName") or None)
    arole = one(docs, "ClusterRole", "agent")
    assert arole["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}
    ]
    abinding = one(docs, "ClusterRoleBinding", "agent")
    assert abinding["subjects"] == [
        {"kind": "ServiceAccount", "name": apod["serviceAccountName"], "namespace": NAMESPACE}
    ]
    policy = one(docs, "ValidatingAdmissionPolicy", "agent")
    vap_binding = one(docs, "ValidatingAdmissionPolicyBinding", "agent")
    assert vap_binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert vap_binding["spec"]["validationActions"] == ["Deny"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    user = f"'system:serviceaccount:{NAMESPACE}:{apod['serviceAccountName']}'"
    assert user in policy["spec"]["matchConditions"][0]["expression"]


def test_agent_policy_can_be_left_out_only_on_purpose(helm: str) -> None:
    docs = render(helm, extra=("--set", "agent.admissionPolicy.enabled=false"))
    policies = [
        d["metadata"]["labels"]["app.kubernetes.io/component"]
        for d in by_kind(docs, "ValidatingAdmissionPolicy")
    ]
    # Left: the serving policy and the operator's router-roles policy.
    assert by_kind(docs, "DaemonSet") and sorted(policies) == ["admission", "operator"]


def test_the_router_roles_policy_pins_what_the_operator_sa_writes(helm: str) -> None:
    docs = render(helm)
    (policy,) = [
        d
        for d in by_kind(docs, "ValidatingAdmissionPolicy")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == "operator"
    ]
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert "serviceaccount:" in policy["spec"]["matchConditions"][0]["expression"]
    rules = " ".join(v["expression"] for v in policy["spec"]["validations"])
    assert "object.rules[0].verbs == ['get', 'list', 'watch']" in rules
    off = render(helm, extra=("--set", "operator.rbac.pinRouterRoles=false"))
    assert not [
        d
        for d in by_kind(off, "ValidatingAdmissionPolicy")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == "operator"
    ]


def test_service_monitor_without_service_fails_with_the_fix(helm: str) -> None:
    proc = run_helm(
        helm,
        "template",
        "dso",
        str(CHART),
        "--kube-version",
        KUBE_VERSION,
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.service.enabled=false",
    )
    assert proc.returncode != 0 and "metrics.service.enabled=true" in proc.stderr


def test_image_allowlist_is_a_validation_only_when_set(helm: str) -> None:
    def image_rules(*extra: str) -> list[str]:
        docs = render(helm, extra=extra)
        policy = one(docs, "ValidatingAdmissionPolicy", "admission")
        return [
            v["expression"]
            for v in policy["spec"]["validations"]
            if "spec.image" in v["expression"]
        ]

    assert image_rules() == []
    (rule,) = image_rules("--set", "servingAdmissionPolicy.allowedImagePrefixes={r.example.com/}")
    assert '["r.example.com/"]' in rule
    # The router image (it runs with a pods-read token) is held to the same prefixes.
    docs = render(
        helm, extra=("--set", "servingAdmissionPolicy.allowedImagePrefixes={r.example.com/}")
    )
    policy = one(docs, "ValidatingAdmissionPolicy", "admission")
    (router,) = [
        v["expression"] for v in policy["spec"]["validations"] if "router.image" in v["expression"]
    ]
    assert '["r.example.com/"]' in router
    docs = render(helm, extra=("--set", "servingAdmissionPolicy.enabled=false"))
    assert not [
        d
        for d in by_kind(docs, "ValidatingAdmissionPolicy")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == "admission"
    ]


@pytest.mark.parametrize("watch", [(), ("llm",)], ids=["cluster-wide", "namespaced"])
def test_compute_domain_value_switches_the_rbac_rule_and_the_operator_flag(
    helm: str, watch: tuple[str, ...]
) -> None:
    namespaces = ("--set", "operator.watchNamespaces={" + ",".join(watch) + "}") if watch else ()

    def rights(docs: list[dict[str, Any]]) -> dict[str, set[str]]:
        rules = [
            rule
            for kind in ("ClusterRole", "Role")
            for d in by_kind(docs, kind)
            if d["metadata"]["labels"].get("app.kubernetes.io/component") == "operator"
            for rule in d["rules"]
        ]
        return {
            f"{r}.{g}": set(rule["verbs"])
            for rule in rules
            for g in rule["apiGroups"]
            for r in rule["resources"]
        }

    def operator_args(docs: list[dict[str, Any]]) -> list[str]:
        deploy = one(docs, "Deployment", "operator")
        return list(deploy["spec"]["template"]["spec"]["containers"][0]["args"])

    on = render(helm, extra=namespaces)
    writes = {"get", "list", "watch", "create", "patch", "delete"}
    assert rights(on)["leaderworkersets.leaderworkerset.x-k8s.io"] == writes
    assert rights(on)["computedomains.resource.nvidia.com"] == writes
    # LeaderWorkerSet writes its StatefulSets; the operator only reads them (refused pods).
    assert rights(on)["statefulsets.apps"] == {"get", "list", "watch"}
    assert rights(on)["events."] == {"create", "list"}
    assert "--no-compute-domain" not in operator_args(on)
    off = render(helm, extra=(*namespaces, "--set", "computeDomain.enabled=false"))
    assert "computedomains.resource.nvidia.com" not in rights(off)
    assert rights(off)["leaderworkersets.leaderworkerset.x-k8s.io"] == writes
    assert "--no-compute-domain" in operator_args(off)
