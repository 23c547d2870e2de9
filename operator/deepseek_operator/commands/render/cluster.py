"""``render --from-cluster``'s reading: the Nodes and API groups of the current kubeconfig's cluster.

The Kubernetes client is imported only when these run, so ``render`` without --from-cluster never
pays for it. A failure is one :class:`~deepseek_operator.errors.InputError` line.
"""

from __future__ import annotations

import json
from typing import Any

from deepseek_operator.errors import InputError


def cluster_group_versions() -> set[str]:
    """Every ``group/version`` the current kubeconfig's API server serves (for --from-cluster)."""
    try:
        from kubernetes import client, config

        config.load_kube_config()  # type: ignore[no-untyped-call]
        groups = client.ApisApi().get_api_versions().groups or []
        return {v.group_version for g in groups for v in (g.versions or [])}
    except Exception as exc:
        raise InputError(
            f"--from-cluster: cannot read the API groups: {exc}".splitlines()[0]
        ) from None


def cluster_nodes() -> list[dict[str, Any]]:
    """Every Node of the cluster, as the API server's JSON (for --from-cluster)."""
    try:
        from kubernetes import client, config

        config.load_kube_config()  # type: ignore[no-untyped-call]
        api = client.CoreV1Api()
        raw = api.list_node(_preload_content=False)
        return list(json.loads(raw.data)["items"])  # type: ignore[attr-defined]
    except Exception as exc:
        raise InputError(f"--from-cluster: cannot list Nodes: {exc}".splitlines()[0]) from None
