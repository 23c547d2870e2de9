"""What a user, and the operator's own ServiceAccount, can and cannot make happen (issue 11).

* The chart's serving admission policy asks the API server's authorizer about the REQUESTING
  user: a user allowed to create DeepSeekServings but not pods, not the workload kind, not the
  Secret its env reads or the PVC it mounts is refused with a message naming the missing right;
  once granted each right, the same user is admitted; metadata-only updates are not checked; an
  image (or a router image) outside ``servingAdmissionPolicy.allowedImagePrefixes`` is refused. Users are real API
  server identities (admin impersonation, ``kubectl --as``), authorized by real RBAC.
* A namespaced install (``operator.watchNamespaces``): the operator, run with the chart's
  arguments and a token of the chart's own ServiceAccount, serves its watched namespace without a
  single refusal, and that ServiceAccount can write no Deployment, LeaderWorkerSet or Service in
  ``kube-system`` (nor in any other namespace). It writes a serving's router objects (a Role
  granting pods get/list/watch among them) on the chart's rights, holding no ``escalate`` or
  ``bind``: a Role granting more than it holds is refused by the escalation check.
"""

from __future__ import annotations

import copy
import json
import pathlib
import subprocess
import uuid
from typing import Any

import pytest
import yaml

from tests.gpu_nodes import HEALTHY_GB200_AGENT_LABELS, make_gpu_node
from tests.k8s.cluster import ControlPlane, wait_for
from tests.k8s.conditions import wait_condition
from tests.k8s.operator import OperatorProcess, rbac_refusals
from tests.servings import serving as _serving

pytestmark = pytest.mark.e2e

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "deepseek-operator"
GROUP = "serving.deepseek-operator.io"


def helm(cp: ControlPlane, *args: str) -> str:
    proc = subprocess.run(
        [str(cp.bin_dir / "helm"), *args],
        capture_output=True,
        text=True,
        env=cp.env,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def serving(namespace: str, name: str = "dsv41", **spec: Any) -> dict[str, Any]:
    """The example as ``namespace/name``, on the example's own node selector."""
    return _serving(namespace, name, pool=None, **spec)


def grant(cp: ControlPlane, namespace: str, user: str, name: str, rules: list[Any]) -> None:
    """A Role with ``rules`` bound to ``user`` in ``namespace``."""
    cp.apply(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": name, "namespace": namespace},
                "rules": rules,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                ],
            },
        ]
    )


def create_as(cp: ControlPlane, user: str, doc: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """``kubectl create --dry-run=server`` as ``user``: admission runs, nothing is stored."""
    return cp.kubectl(
        "create", "--dry-run=server", f"--as={user}", "-f", "-", input=doc, check=False
    )


def install_policy(cp: ControlPlane, release: str, *sets: str) -> list[dict[str, Any]]:
    out = helm(
        cp,
        "template",
        release,
        str(CHART),
        "--show-only",
        "templates/serving-admission-policy.yaml",
        *[arg for s in sets for arg in ("--set", s)],
    )
    docs = [d for d in yaml.safe_load_all(out) if d]
    cp.apply(docs)
    return docs


def remove(cp: ControlPlane, docs: list[dict[str, Any]]) -> None:
    for d in docs:
        cp.kubectl(
            "delete", d["kind"].lower(), d["metadata"]["name"], "--ignore-not-found", check=False
        )


def test_serving_policy_refuses_the_confused_deputy_and_admits_an_authorized_user(
    crds: ControlPlane, namespace: str
) -> None:
    cp = crds
    user = f"alice-{uuid.uuid4().hex[:6]}"
    release = f"sec-{uuid.uuid4().hex[:5]}"
    # Alice may create and edit DeepSeekServings, nothing else.
    grant(
        cp,
        namespace,
        user,
        "dss-editor",
        [
            {
                "apiGroups": [GROUP],
                "resources": ["deepseekservings"],
                "verbs": ["get", "list", "create", "patch", "update"],
            }
        ],
    )
    doc = serving(
        namespace,
        env=[{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "t"}}}],
        modelCache={"claimName": "weights"},
    )
    # Without the policy the API server admits it: the operator would then create the pods,
    # read the Secret and mount the PVC on alice's behalf.
    assert create_as(cp, user, doc).returncode == 0
    docs = install_policy(cp, release)
    policy = docs[0]["metadata"]["name"]
    try:

        def refused() -> str | None:
            proc = create_as(cp, user, doc)
            return proc.stderr if proc.returncode != 0 and policy in proc.stderr else None

        first = wait_for(refused, timeout=120, what="the serving admission policy to take effect")
        assert f"spec: {user} may not create pods in namespace {namespace}" in first, first

        grant(
            cp,
            namespace,
            user,
            "pods",
            [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}],
        )
        err = create_as(cp, user, doc).stderr
        assert f"{user} may not create deployments.apps in namespace {namespace}" in err, err
        # A replica spanning pods needs a LeaderWorkerSet instead.
        multi = serving(
            namespace,
            parallelism={"dataParallelSize": 2, "dataParallelSizeLocal": 1},
        )
        err = create_as(cp, user, multi).stderr
        assert (
            f"{user} may not create leaderworkersets.leaderworkerset.x-k8s.io in namespace "
            f"{namespace}" in err
        ), err

        grant(
            cp,
            namespace,
            user,
            "workloads",
            [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create"]}],
        )
        err = create_as(cp, user, doc).stderr
        assert (
            f"spec.env: {user} may not get every Secret it references (hf-token) in namespace {namespace}"
            in err
        )
        # Rights on another Secret do not count: the check names the referenced one.
        grant(
            cp,
            namespace,
            user,
            "other-secret",
            [
                {
                    "apiGroups": [""],
                    "resources": ["secrets"],
                    "resourceNames": ["other"],
                    "verbs": ["get"],
                }
            ],
        )
        assert (
            "may not get every Secret it references (hf-token)" in create_as(cp, user, doc).stderr
        )
        grant(
            cp,
            namespace,
            user,
            "hf-token",
            [
                {
                    "apiGroups": [""],
                    "resources": ["secrets"],
                    "resourceNames": ["hf-token"],
                    "verbs": ["get"],
                }
            ],
        )
        err = create_as(cp, user, doc).stderr
        assert (
            f"spec.modelCache.claimName: {user} may not get PersistentVolumeClaim weights" in err
        ), err
        cm = serving(
            namespace,
            env=[{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}],
        )
        assert "may not get every ConfigMap it references (cfg)" in create_as(cp, user, cm).stderr

        grant(
            cp,
            namespace,
            user,
            "weights",
            [
                {
                    "apiGroups": [""],
                    "resources": ["persistentvolumeclaims"],
                    "resourceNames": ["weights"],
                    "verbs": ["get"],
                }
            ],
        )
        # Every right the workload implies: admitted.
        admitted = create_as(cp, user, doc)
        assert admitted.returncode == 0, admitted.stderr

        # spec.modelCache.fill makes the operator create a Job that reads the token Secret and
        # sends it to the hub: the user must be allowed both (issue 42).
        filled = copy.deepcopy(doc)
        filled["spec"]["model"]["revision"] = "0123456789abcdef0123456789abcdef01234567"
        filled["spec"]["modelCache"]["fill"] = {
            "tokenSecretRef": {"name": "fill-token", "key": "token"},
            "endpoint": "https://hub.example.com",
        }
        err = create_as(cp, user, filled).stderr
        assert f"spec.modelCache.fill: {user} may not create jobs.batch" in err, err
        grant(
            cp,
            namespace,
            user,
            "jobs",
            [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}],
        )
        err = create_as(cp, user, filled).stderr
        assert (
            f"spec.modelCache.fill.tokenSecretRef: {user} may not get Secret fill-token" in err
        ), err
        grant(
            cp,
            namespace,
            user,
            "fill-token",
            [
                {
                    "apiGroups": [""],
                    "resources": ["secrets"],
                    "resourceNames": ["fill-token"],
                    "verbs": ["get"],
                }
            ],
        )
        admitted = create_as(cp, user, filled)
        assert admitted.returncode == 0, admitted.stderr

        # Metadata-only updates are not checked; spec changes are.
        cp.apply(serving(namespace, name="owned"))  # created by the admin
        labelled = cp.kubectl(
            "label", "dss", "owned", "-n", namespace, "team=a", f"--as={user}", check=False
        )
        assert labelled.returncode == 0, labelled.stderr
        cp.kubectl("delete", "rolebinding", "pods", "-n", namespace)

        def spec_refused() -> str | None:
            proc = cp.kubectl(
                "patch", "dss", "owned", "-n", namespace, "--type=merge",
                "-p", json.dumps({"spec": {"replicas": 2}}), f"--as={user}", check=False,
            )  # fmt: skip
            return proc.stderr if proc.returncode != 0 else None

        err = wait_for(spec_refused, timeout=120, what="the revoked pods right to count")
        assert f"{user} may not create pods" in err, err
    finally:
        remove(cp, docs)

    # The optional image allowlist.
    docs = install_policy(
        cp, release, "servingAdmissionPolicy.allowedImagePrefixes={registry.example.com/vllm/}"
    )
    try:

        def image_refused() -> str | None:
            proc = cp.kubectl("create", "--dry-run=server", "-f", "-", input=doc, check=False)
            return proc.stderr if proc.returncode != 0 else None

        err = wait_for(image_refused, timeout=120, what="the image allowlist to take effect")
        assert "spec.image: vllm/vllm-openai:" in err and "registry.example.com/vllm/" in err
        allowed = copy.deepcopy(doc)
        allowed["spec"]["image"] = "registry.example.com/vllm/vllm-openai:v0.20"
        proc = cp.kubectl("create", "--dry-run=server", "-f", "-", input=allowed, check=False)
        assert proc.returncode == 0, proc.stderr
        # The router image runs with a pods-read token: held to the same prefixes.
        router = copy.deepcopy(allowed)
        router["spec"]["router"] = {"image": "ghcr.io/someone/router:1"}
        proc = cp.kubectl("create", "--dry-run=server", "-f", "-", input=router, check=False)
        assert proc.returncode != 0 and "spec.router.image: ghcr.io/someone/router:1" in proc.stderr
        router["spec"]["router"]["image"] = "registry.example.com/vllm/router:0.1.17"
        proc = cp.kubectl("create", "--dry-run=server", "-f", "-", input=router, check=False)
        assert proc.returncode == 0, proc.stderr
    finally:
        remove(cp, docs)


def gb200(name: str, pool: str) -> dict[str, Any]:
    return make_gpu_node(
        name,
        "NVIDIA-GB200",
        4,
        (10, 0),
        agent_labels=HEALTHY_GB200_AGENT_LABELS,
        extra_labels={"pool": pool},
    )


def test_a_namespaced_install_serves_its_namespace_and_cannot_write_in_kube_system(
    lws_cluster: ControlPlane, namespace: str, node_factory: Any, tmp_path: pathlib.Path
) -> None:
    # The LWS CRD must be served for `kubectl auth can-i patch leaderworkersets` to answer.
    cp = lws_cluster
    served = cp.create_namespace(f"{namespace[:50]}-llm")
    release = f"dso-{uuid.uuid4().hex[:5]}"
    try:
        helm(
            cp,
            "install",
            release,
            str(CHART),
            "-n",
            namespace,
            "--set",
            f"operator.watchNamespaces={{{served}}}",
            "--set",
            f"operator.peering.name={release}-peering",
        )
        manifest = [
            d
            for d in yaml.safe_load_all(helm(cp, "get", "manifest", release, "-n", namespace))
            if d
        ]
        deploy = next(
            d
            for d in manifest
            if d["kind"] == "Deployment"
            and d["metadata"]["labels"]["app.kubernetes.io/component"] == "operator"
        )
        pod_spec = deploy["spec"]["template"]["spec"]
        sa = pod_spec["serviceAccountName"]
        args = pod_spec["containers"][0]["args"]
        assert f"--namespace={served}" in args
        who = f"system:serviceaccount:{namespace}:{sa}"

        def can(*check: str) -> bool:
            proc = cp.kubectl("auth", "can-i", *check, f"--as={who}", check=False)
            return proc.stdout.strip() == "yes"

        for verb, resource in (
            ("create", "deployments.apps"),
            ("patch", "leaderworkersets.leaderworkerset.x-k8s.io"),
            ("create", "services"),
            ("delete", "deployments.apps"),
        ):
            assert can(verb, resource, "-n", served)
            assert not can(verb, resource, "-n", "kube-system")
            assert not can(verb, resource, "-n", "default")
        assert can("list", "nodes") and not can("patch", "nodes")
        # Pods: read in the served namespace only (status.groups; `get` is held because the
        # router's Role grants it, and the API server lets a subject grant only what it holds).
        assert can("watch", "pods", "-n", served) and can("list", "pods", "-n", served)
        assert can("get", "pods", "-n", served)
        assert not can("list", "pods", "-n", "kube-system")
        assert not can("create", "pods", "-n", served) and not can("delete", "pods", "-n", served)
        # The router's objects: written in the served namespace only; no escalate, no bind.
        for resource in ("roles.rbac.authorization.k8s.io", "rolebindings.rbac.authorization.k8s.io",
                         "serviceaccounts", "networkpolicies.networking.k8s.io"):  # fmt: skip
            assert can("create", resource, "-n", served) and can("patch", resource, "-n", served)
            assert not can("create", resource, "-n", "kube-system")
        assert not can("escalate", "roles.rbac.authorization.k8s.io", "-n", served)
        assert not can("bind", "roles.rbac.authorization.k8s.io", "-n", served)
        assert not can("list", "deployments.apps", "--all-namespaces")
        # ResourceClaims: listed and watched in every namespace (a claim anywhere holds a
        # device), never fetched alone or written.
        claims = "resourceclaims.resource.k8s.io"
        assert can("list", claims, "--all-namespaces") and can("watch", claims, "-n", "default")
        assert not can("get", claims, "-n", served) and not can("patch", claims, "-n", served)
        assert not can("update", f"{claims}/status", "-n", served)
        assert not can("get", "secrets", "-n", served)

        # The same, as the ServiceAccount itself: the API server refuses the write.
        token = cp.create_token(namespace, sa)
        kubeconfig = cp.kubeconfig_for_token(token, tmp_path / "kubeconfig", user="chart-operator")
        probe = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "dso-probe", "namespace": "kube-system"},
            "spec": {"ports": [{"port": 80}]},
        }
        denied = subprocess.run(
            [str(cp.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig}", "create", "-f", "-"],
            input=json.dumps(probe),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), denied

        # The escalation check: a Role with the router's rights passes, one with more does not.
        def role_as_operator(verbs: list[str]) -> subprocess.CompletedProcess[str]:
            role = {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "dso-probe", "namespace": served},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs}],
            }
            return subprocess.run(
                [str(cp.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig}", "create",
                 "--dry-run=server", "-f", "-"],
                input=json.dumps(role), capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip

        assert role_as_operator(["get", "list", "watch"]).returncode == 0
        wider = role_as_operator(["get", "list", "watch", "delete"])
        assert wider.returncode != 0 and "not currently held" in wider.stderr, wider

        # The operator on exactly these rights serves the watched namespace, never refused.
        node_factory(gb200(f"{served[:50]}-gb0", served))
        op = OperatorProcess(cp, tmp_path, kubeconfig=kubeconfig, extra=args[1:]).start()
        try:
            # With the router: its ServiceAccount, Role, RoleBinding and NetworkPolicies too.
            cp.apply(serving(served, nodeSelector={"pool": served}, router={"enabled": True}))

            wait_condition(cp, served, "BackendResolved", "True", timeout=120)
            wait_for(
                lambda: (
                    cp.kubectl("get", "deployment", "dsv41", "-n", served, check=False).returncode
                    == 0
                ),
                timeout=60,
                what="the Deployment in the watched namespace",
            )
            wait_for(
                lambda: all(
                    cp.kubectl("get", kind, "dsv41-api", "-n", served, check=False).returncode == 0
                    for kind in ("serviceaccount", "role", "rolebinding", "networkpolicy")
                ),
                timeout=60,
                what="the router's ServiceAccount, Role, RoleBinding and NetworkPolicy",
            )
            log = op.log_path.read_text(errors="replace")
            refused = rbac_refusals(log.splitlines())
            assert not refused, "the namespaced RBAC refused the operator:\n" + "\n".join(
                refused[:10]
            )
            assert "Traceback" not in log, op.logs()
        finally:
            op.stop()
    finally:
        helm(cp, "uninstall", release, "-n", namespace, "--wait", "--timeout=60s")
        cp.delete_namespace(served)
