"""``render --from-cluster``'s reading: the Nodes, GPU ResourceSlices and API groups of the current kubeconfig's cluster.

The Kubernetes client is imported only when these run, so ``render`` without --from-cluster never
pays for it. A failure is one :class:`~deepseek_operator.errors.InputError` line.
"""

from __future__ import annotations

import json
from typing import Any

from deepseek_operator.errors import InputError
from deepseek_operator.names import DRA_API_VERSION, DRA_GPU_DRIVER


def cluster_group_versions() -> set[str]:
    """Every ``group/version`` the current kubeconfig's API server serves (for --from-cluster)."""
    try:
        from kubernetes import client

        from deepseek_operator.kube.credentials import api_client

        groups = client.ApisApi(api_client()).get_api_versions().groups or []
        return {v.group_version for g in groups for v in (g.versions or [])}
    except Exception as exc:
        raise InputError(
            f"--from-cluster: cannot read the API groups: {exc}".splitlines()[0]
        ) from None


def cluster_nodes() -> list[dict[str, Any]]:
    """Every Node of the cluster, as the API server's JSON (for --from-cluster)."""
    try:
        from kubernetes import client

        from deepseek_operator.kube.credentials import api_client

        api = client.CoreV1Api(api_client())
        raw = api.list_node(_preload_content=False)
        return list(json.loads(raw.data)["items"])  # type: ignore[attr-defined]
    except Exception as exc:
        raise InputError(f"--from-cluster: cannot list Nodes: {exc}".splitlines()[0]) from None


def cluster_resource_slices() -> list[dict[str, Any]]:
    """The cluster's ``gpu.nvidia.com`` ResourceSlices (``resource.k8s.io/v1``), for --from-cluster.

    Filtered by the API server (``spec.driver`` is a ResourceSlice field selector), so a cluster
    full of other drivers' slices costs nothing here.
    """
    try:
        from kubernetes import client

        from deepseek_operator.kube.credentials import api_client

        group, _, version = DRA_API_VERSION.partition("/")
        raw = client.CustomObjectsApi(api_client()).list_cluster_custom_object(
            group,
            version,
            "resourceslices",
            field_selector=f"spec.driver={DRA_GPU_DRIVER}",
            _preload_content=False,
        )
        return list(json.loads(raw.data)["items"])  # type: ignore[attr-defined]
    except Exception as exc:
        raise InputError(
            f"--from-cluster: cannot list ResourceSlices: {exc}".splitlines()[0]
        ) from None


def cluster_resource_claims() -> list[dict[str, Any]]:
    """Every namespace's ResourceClaims (``resource.k8s.io/v1``), for --from-cluster: the
    devices they hold are not free, as the operator's claim watch sees them."""
    try:
        from kubernetes import client

        from deepseek_operator.kube.credentials import api_client

        group, _, version = DRA_API_VERSION.partition("/")
        raw = client.CustomObjectsApi(api_client()).list_cluster_custom_object(
            group, version, "resourceclaims", _preload_content=False
        )
        return list(json.loads(raw.data)["items"])  # type: ignore[attr-defined]
    except Exception as exc:
        raise InputError(
            f"--from-cluster: cannot list ResourceClaims: {exc}".splitlines()[0]
        ) from None
