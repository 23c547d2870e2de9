"""The chart's router-roles admission policy (``operator.rbac.pinRouterRoles``) on a real API
server: RBAC alone lets the operator's ServiceAccount write a Role with any right it holds; with
the policy, it may write exactly the router's Role and RoleBinding as plan() renders them."""

from __future__ import annotations

import pathlib
import subprocess
from typing import Any

import pytest
import yaml

from deepseek_operator.api.load import parse_serving
from deepseek_operator.nodes.facts import build_inventory
from deepseek_operator.plan import Observed, plan
from tests.k8s.cluster import ControlPlane, wait_for

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "deepseek-operator"
OPERATOR_SA = "dso-operator"


def _as_operator(
    cp: ControlPlane, kubeconfig: pathlib.Path, obj: dict[str, Any], dry_run: bool = True
) -> str | None:
    """Create ``obj`` (a server dry run unless told) as the operator's ServiceAccount; the
    refusal, or None."""
    out = subprocess.run(
        [str(cp.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig}", "create",
         *(["--dry-run=server"] if dry_run else []), "-f", "-"],
        input=yaml.safe_dump(obj), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return out.stderr if out.returncode != 0 else None


@pytest.mark.integration
def test_the_operator_may_write_only_the_routers_role_and_binding(
    control_plane: ControlPlane, namespace: str, tmp_path: pathlib.Path
) -> None:
    cp = control_plane
    raw = yaml.safe_load((REPO / "examples/dsv41-flash-1p1d-gb200.yaml").read_text())
    raw["metadata"]["namespace"] = namespace
    items = yaml.safe_load((REPO / "examples/nodes-gb200.yaml").read_text())["items"]
    planned = plan(parse_serving(raw), build_inventory(items), Observed.offline(), "t")
    role = next(o for o in planned.objects if o["kind"] == "Role")
    binding = next(o for o in planned.objects if o["kind"] == "RoleBinding")
    # The operator's rights in this namespace, as the chart's namespaced rules give them (the
    # parts that matter here): roles and bindings written, pods read, Deployments written.
    writes = ["get", "list", "watch", "create", "patch", "delete"]
    cp.kubectl("create", "serviceaccount", OPERATOR_SA, "-n", namespace)
    cp.apply(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "operator", "namespace": namespace},
                "rules": [
                    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": writes},
                    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": writes},
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "operator", "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "operator"},
                "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_SA, "namespace": namespace}],
            },
        ]
    )  # fmt: skip
    kubeconfig = cp.kubeconfig_for_token(
        cp.create_token(namespace, OPERATOR_SA), tmp_path / "kubeconfig", user="operator"
    )
    wider = {
        **role,
        "metadata": {**role["metadata"], "name": "deployer"},
        "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create"]}],
    }
    # RBAC alone: the operator holds deployments create, so it may grant it.
    assert _as_operator(cp, kubeconfig, wider) is None

    out = subprocess.run(
        [str(cp.bin_dir / "helm"), "template", "dso", str(CHART), "-n", namespace,
         "--set", f"operator.serviceAccount.name={OPERATOR_SA}",
         "--show-only", "templates/router-role-policy.yaml"],
        capture_output=True, text=True, env=cp.env, timeout=120, check=True,
    )  # fmt: skip
    policy = [d for d in yaml.safe_load_all(out.stdout) if d]
    cp.apply(policy)
    try:
        refused = wait_for(
            lambda: _as_operator(cp, kubeconfig, wider),
            timeout=60,
            what="the router-roles policy to take effect",
        )
        assert "Role deployer: the deepseek-operator writes only the vLLM router's Role" in refused
        # What plan() renders passes.
        assert _as_operator(cp, kubeconfig, role, dry_run=False) is None
        # (A binding's own RBAC check reads the Role it binds: it exists now.)
        assert _as_operator(cp, kubeconfig, binding) is None
        other = {
            **binding,
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}],
        }
        assert "binds only the vLLM router's Role" in (_as_operator(cp, kubeconfig, other) or "")
        # Anyone else (here the admin) is not concerned.
        assert (
            cp.kubectl(
                "create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(wider)
            ).returncode
            == 0
        )
    finally:
        for d in policy:
            cp.kubectl(
                "delete",
                d["kind"].lower(),
                d["metadata"]["name"],
                "--ignore-not-found",
                check=False,
            )
