"""What a pod of a disaggregated role adds: ``--kv-transfer-config``, NIXL and UCX env, ports.

* ``--kv-transfer-config``: the connector and the role's ``kv_role`` (``kv_producer`` for
  prefill, ``kv_consumer`` for decode; NixlConnector deprecates ``kv_both``), rendered before the
  extraArgs (which may not set it).
* ``VLLM_NIXL_SIDE_CHANNEL_HOST`` from the pod IP (the peer must reach it; vLLM's default is
  localhost) and ``VLLM_NIXL_SIDE_CHANNEL_PORT``; each engine listens on that port + its DP rank,
  so a pod declares one ``nixl-<rank>`` container port per DP rank it may hold.
* UCX: ``UCX_TLS`` with ``rc`` (without it NIXL silently falls back to TCP) and, when the pod
  has an IMEX channel, ``UCX_CUDA_IPC_ENABLE_MNNVL=y``. A UCX variable the user sets in
  ``spec.env`` wins (tuning); the side channel is the operator's.

What a role's pods get depends on that role's own spec and nodes only, never on the other
role's: a decode-only edit (its batch shape, backend, or a layout that leaves the cliques of the
prefill nodes) must not rewrite the prefill pod template, which would reload the prefill
pool's weights for nothing. So the peer preference is rendered whenever the role's own nodes
are in a clique (a preferred term nothing satisfies scores nothing), and MNNVL is enabled
whenever the pod has an IMEX channel, as llm-d's wide-EP recipe does on every such pod (the
peer term being a preference, a pod could always land outside its peers' clique).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.engine.cluster_apis import ComputeDomainMode
from deepseek_operator.engine.resolution import KVTransfer, Resolution
from deepseek_operator.names import (
    ANNOTATION_TEMPLATE_HASH,
    GFD_CLIQUE,
    INFERENCE_POOL_API_VERSION,
    INFERENCE_POOL_KIND,
    LABEL_ENDPOINT,
    LABEL_PD_ROLE,
    LABEL_SERVING,
    NIXL_SIDE_CHANNEL_HOST_ENV,
    NIXL_SIDE_CHANNEL_PORT,
    NIXL_SIDE_CHANNEL_PORT_ENV,
    UCX_MNNVL_ENV,
    UCX_TLS,
    UCX_TLS_ENV,
)

OPERATOR_ENV = (NIXL_SIDE_CHANNEL_HOST_ENV, NIXL_SIDE_CHANNEL_PORT_ENV)
"""Env vars the operator owns in a role's pods (a spec.env entry of that name is dropped)."""


def kv_transfer_config(transfer: KVTransfer) -> str:
    """The ``--kv-transfer-config`` JSON value of a role."""
    return json.dumps(
        {"kv_connector": transfer.connector, "kv_role": transfer.kv_role}, separators=(",", ":")
    )


def kv_env(spec: DeepSeekServingSpec, res: Resolution) -> list[dict[str, Any]]:
    """The NIXL side-channel and UCX environment of a role's vLLM container."""
    transfer = res.kv_transfer
    assert transfer is not None
    env: list[dict[str, Any]] = [
        {
            "name": NIXL_SIDE_CHANNEL_HOST_ENV,
            "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}},
        },
        {"name": NIXL_SIDE_CHANNEL_PORT_ENV, "value": str(NIXL_SIDE_CHANNEL_PORT)},
    ]
    if not spec.declares_env(UCX_TLS_ENV):
        env.append({"name": UCX_TLS_ENV, "value": UCX_TLS})
    # The pod's own IMEX channel decides, not whether the other role shares its clique today
    # (that would tie this role's template to the other role's layout).
    mnnvl = res.compute_domain is ComputeDomainMode.RENDERED
    if mnnvl and not spec.declares_env(UCX_MNNVL_ENV):
        env.append({"name": UCX_MNNVL_ENV, "value": "y"})
    return env


def kv_ports(spec: DeepSeekServingSpec, res: Resolution, leader: bool) -> list[dict[str, Any]]:
    """One ``nixl-<rank>`` container port per DP rank the pod may hold.

    The leader holds ranks 0 .. local DP - 1; a worker's first rank is its LWS worker index x
    local DP, which one worker template cannot say, so a worker declares every rank of the
    replica that is not the leader's.
    """
    p = spec.parallelism
    local = p.dp_local
    ranks = (
        range(local) if leader or res.pods_per_replica == 1 else range(local, p.data_parallel_size)
    )
    return [
        {"name": f"nixl-{rank}", "containerPort": NIXL_SIDE_CHANNEL_PORT + rank, "protocol": "TCP"}
        for rank in ranks
    ]


def template_hash(workload: dict[str, Any]) -> str:
    """A short hash of a Deployment's or LeaderWorkerSet's pod template(s)."""
    spec = workload["spec"]
    templates = spec.get("template") or spec.get("leaderWorkerTemplate")
    text = json.dumps(templates, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def with_template_hash(child: dict[str, Any]) -> dict[str, Any]:
    """``child`` with :data:`ANNOTATION_TEMPLATE_HASH` when it is a workload (else as it is)."""
    if child.get("kind") not in ("Deployment", "LeaderWorkerSet"):
        return child
    meta = dict(child["metadata"])
    meta["annotations"] = {
        **meta.get("annotations", {}),
        ANNOTATION_TEMPLATE_HASH: template_hash(child),
    }
    return {**child, "metadata": meta}


def peer_affinity(serving: str, res: Resolution) -> dict[str, Any] | None:
    """Preferred pod affinity to the other roles' pods in the same NVLink clique, or None.

    Whenever this role's own eligible nodes are in a clique, whatever the other role's layout:
    the scheduler prefers a clique where the peers run (the transfer can then go over
    multi-node NVLink) and falls back to any eligible node (RDMA) when none has room or the
    peers run in no clique (a preferred term no node satisfies scores nothing). Tying it to
    the other role's nodes would make a decode-only layout edit rewrite, and roll, the prefill
    pool. The clique label is the pool's (multi-pod groups) or GPU Feature Discovery's.
    """
    transfer = res.kv_transfer
    if transfer is None or not transfer.own_clique:
        return None
    return {
        "weight": 50,
        "podAffinityTerm": {
            "labelSelector": {
                "matchLabels": {LABEL_SERVING: serving},
                "matchExpressions": [
                    {"key": LABEL_PD_ROLE, "operator": "NotIn", "values": [transfer.role]}
                ],
            },
            "topologyKey": res.clique_key or GFD_CLIQUE,
        },
    }


def inference_pool(
    name: str, namespace: str, spec: DeepSeekServingSpec, metadata: dict[str, Any]
) -> dict[str, Any] | None:
    """The InferencePool over both roles' HTTP-serving pods, or None without an endpoint picker.

    Its selector is the serving's label plus :data:`LABEL_ENDPOINT` (a LeaderWorkerSet's
    headless workers serve no HTTP); the endpoint picker tells prefill from decode pods by
    ``llm-d.ai/role``. ``metadata``: the child metadata (labels, owner) to give it.
    """
    d = spec.disaggregation
    if d is None or d.endpoint_picker is None:
        return None
    return {
        "apiVersion": INFERENCE_POOL_API_VERSION,
        "kind": INFERENCE_POOL_KIND,
        "metadata": {**metadata, "name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {LABEL_SERVING: name, LABEL_ENDPOINT: "true"}},
            "targetPorts": [{"number": spec.port}],
            "endpointPickerRef": {
                "name": d.endpoint_picker.name,
                "port": {"number": d.endpoint_picker.port},
            },
        },
    }
