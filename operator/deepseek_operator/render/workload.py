"""Kubernetes manifests for a decision: pod template, Deployment + Service, or multi-pod replicas.

Single-pod replicas (the normal case) are one Deployment with ``replicas`` pods and a Service.
Replicas that span pods (``dataParallelSizeLocal < dataParallelSize``) are one LeaderWorkerSet
(one group per replica: leader = DP head, ``--headless`` workers), the Service selecting the
leaders and, on multi-node NVLink trays with NVIDIA's DRA driver, a ComputeDomain whose IMEX
channel every pod claims. Every child carries an owner reference (when the owner's uid is known)
and ``app.kubernetes.io/*`` labels.
"""

from __future__ import annotations

from typing import Any

from deepseek_operator.api.load import ServingObject
from deepseek_operator.engine.cluster_apis import ComputeDomainMode
from deepseek_operator.engine.resolution import Resolution
from deepseek_operator.names import (
    ANNOTATION_BACKEND,
    ANNOTATION_SEQUENCE_PARALLEL,
    CHANNEL_TEMPLATE_SUFFIX,
    COMPUTE_DOMAIN_API_VERSION,
    COMPUTE_DOMAIN_CLAIM,
    COMPUTE_DOMAIN_KIND,
    COMPUTE_DOMAIN_SUFFIX,
    DRA_API_VERSION,
    GPU_CLAIM_SUFFIX,
    LABEL_COMPONENT,
    LABEL_ROLE,
    LWS_API_VERSION,
    LWS_KIND,
    RESOURCE_CLAIM_TEMPLATE_KIND,
    SERVICE_SUFFIX,
)
from deepseek_operator.render.affinity import group_affinity, node_affinity
from deepseek_operator.render.argv import PodRole, vllm_args
from deepseek_operator.render.claims import CLAIM_NAME, claim_template_spec
from deepseek_operator.render.kv_transfer import (
    OPERATOR_ENV,
    kv_env,
    kv_ports,
    kv_transfer_config,
    peer_affinity,
)
from deepseek_operator.render.metadata import (
    _metadata,
    _pod_labels,
    common_labels,
    queue_labels,
    selector_labels,
)

# Long weight loads: 20+ minutes for V4.1's 476 GiB is normal; allow two hours before restarting.
STARTUP_PROBE_PERIOD_S = 15
STARTUP_PROBE_FAILURES = 480


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": 5,
    }


def container_security_context(spans_pods: bool) -> dict[str, Any]:
    """What vLLM images (root, GPU access through the device plugin) run with, and no more.

    No privilege escalation, the runtime's default seccomp profile, no raw sockets: Pod Security
    "baseline" admits it. A replica that spans pods also needs IPC_LOCK (pinned memory for
    NCCL across nodes), which only the "privileged" level admits.
    """
    capabilities: dict[str, list[str]] = {"drop": ["NET_RAW"]}
    if spans_pods:
        capabilities["add"] = ["IPC_LOCK"]
    return {
        "allowPrivilegeEscalation": False,
        "seccompProfile": {"type": "RuntimeDefault"},
        "capabilities": capabilities,
    }


def pod_template(
    obj: ServingObject,
    res: Resolution,
    role: PodRole | None = None,
    extra_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The pod template of one serving pod."""
    spec = obj.spec
    gpus = str(res.gpus_per_pod)
    requests: dict[str, Any] = {k: str(v) for k, v in spec.resources.requests.items()}
    limits: dict[str, Any] = {k: str(v) for k, v in spec.resources.limits.items()}
    if not res.gpu_claims:  # through DRA the claim holds the GPUs, never a limit
        requests[spec.gpu_resource_name] = gpus
        limits[spec.gpu_resource_name] = gpus
    cache = spec.model_cache
    env = [{"name": "HF_HOME", "value": cache.mount_path}]
    owned: tuple[str, ...] = ("HF_HOME",)
    if cache.fill is not None:
        # The operator filled the cache before this pod was created: vLLM reads, never downloads.
        # The cache is mounted read-only, so transformers' copies of a checkpoint's remote code
        # (trustRemoteCode; HF_HOME/modules by default) go to the container's own /tmp.
        env += [
            {"name": "HF_HUB_OFFLINE", "value": "1"},
            {"name": "HF_MODULES_CACHE", "value": "/tmp/hf-modules"},
        ]
        owned += ("HF_HUB_OFFLINE", "HF_MODULES_CACHE")
    if res.kv_transfer:
        owned += tuple(OPERATOR_ENV)
    env += [e.manifest() for e in spec.env if e.name not in owned]
    ports = [{"name": "http", "containerPort": spec.port, "protocol": "TCP"}]
    kv_config = None
    if res.kv_transfer is not None:
        env += kv_env(spec, res)
        ports += kv_ports(spec, res, leader=role is None or role.is_head)
        kv_config = kv_transfer_config(res.kv_transfer)
    container: dict[str, Any] = {
        "name": "vllm",
        "image": spec.image,
        "command": ["vllm", "serve"],
        "args": vllm_args(spec, res, role, kv_config),
        "env": env,
        "ports": ports,
        "resources": {"requests": requests, "limits": limits},
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "model-cache", "mountPath": cache.mount_path}
            | ({"readOnly": True} if cache.fill is not None else {}),
        ],
    }
    if role is None or role.is_head:
        container["startupProbe"] = _probe(
            "/health", STARTUP_PROBE_PERIOD_S, STARTUP_PROBE_FAILURES
        )
        container["readinessProbe"] = _probe("/health", 10, 3)
        container["livenessProbe"] = _probe("/health", 30, 5)
    container["securityContext"] = container_security_context(res.pods_per_replica > 1)
    cache_volume: dict[str, Any] = (
        {"name": "model-cache", "persistentVolumeClaim": {"claimName": cache.claim_name}}
        if cache.claim_name
        else {
            "name": "model-cache",
            "emptyDir": {"sizeLimit": cache.size_limit} if cache.size_limit else {},
        }
    )
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size_limit}},
            cache_volume,
        ],
        "automountServiceAccountToken": spec.automount_service_account_token,
        "terminationGracePeriodSeconds": 120,
    }
    affinity = node_affinity(res.requirement, dra=res.gpu_claims) or {}
    if res.pods_per_replica > 1 and res.clique_key is not None:
        affinity.update(group_affinity(obj.name, res.clique_key))
    peer = peer_affinity(obj.serving_name, res)
    if peer is not None:  # a disaggregated role: near its peers when a clique allows
        pod_affinity = affinity.setdefault("podAffinity", {})
        pod_affinity.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(peer)
    if affinity:
        pod_spec["affinity"] = affinity
    claims: list[dict[str, str]] = []
    if res.gpu_claims:
        claims.append({"name": CLAIM_NAME, "resourceClaimTemplateName": gpu_claim_name(obj)})
    if res.compute_domain is ComputeDomainMode.RENDERED:
        claims.append(
            {"name": COMPUTE_DOMAIN_CLAIM, "resourceClaimTemplateName": channel_template_name(obj)}
        )
    if claims:
        pod_spec["resourceClaims"] = claims
        container["resources"]["claims"] = [{"name": c["name"]} for c in claims]
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod_spec["tolerations"] = [t.manifest() for t in spec.tolerations]
    return {
        "metadata": {
            "labels": {
                **common_labels(obj),
                **_pod_labels(obj, role is None or role.is_head),
                **(extra_labels or {}),
            },
            "annotations": {
                ANNOTATION_BACKEND: res.moe_backend,
                ANNOTATION_SEQUENCE_PARALLEL: str(res.sequence_parallel).lower(),
            },
        },
        "spec": pod_spec,
    }


def render_deployment(
    obj: ServingObject, res: Resolution, replicas: int | None = None
) -> dict[str, Any]:
    """A Deployment of single-pod replicas (``replicas``: default ``spec.replicas``)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(obj, obj.name, {LABEL_COMPONENT: "serving", **queue_labels(obj)}),
        "spec": {
            "replicas": obj.spec.replicas if replicas is None else replicas,
            "selector": {"matchLabels": selector_labels(obj)},
            # No surge: a rollout must not need GPUs beyond what the replicas already hold.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "progressDeadlineSeconds": STARTUP_PROBE_PERIOD_S * STARTUP_PROBE_FAILURES,
            # Kueue's pod integration reads the queue from each pod (its Deployment webhook
            # copies the label into the template too; here it holds without that webhook).
            "template": pod_template(
                obj, res, extra_labels={LABEL_COMPONENT: "serving", **queue_labels(obj)}
            ),
        },
    }


def service_name(obj: ServingObject) -> str:
    """The client-facing Service: ``<name>-api``, in both layouts.

    Never ``<name>``: LeaderWorkerSet's controller creates its headless Service under the
    LeaderWorkerSet's name (ours is ``<name>``) only if no Service of that name exists, and the
    workers reach their leader (``LWS_LEADER_ADDRESS``, ``<leader-pod>.<name>.<namespace>``) only
    through it. The one name scheme (``names.CHILD_NAMES``) keeps every child name apart from
    every other serving's: admission refuses serving names ending in ``-api`` (serving ``x-api``
    whose headless Service would be ``x-api`` would meet serving ``x``'s Service). 44
    characters at most (``MAX_NAME_LENGTH`` 40), within a Service name's 63.
    """
    return obj.name + SERVICE_SUFFIX


def render_service(obj: ServingObject, heads_only: bool = False) -> dict[str, Any]:
    """The ClusterIP Service on the OpenAI-compatible port (:func:`service_name`)."""
    selector = selector_labels(obj)
    if heads_only:
        selector = {**selector, LABEL_ROLE: "head"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(obj, service_name(obj), {LABEL_COMPONENT: "serving"}),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [
                {"name": "http", "port": obj.spec.port, "targetPort": "http", "protocol": "TCP"}
            ],
        },
    }


def compute_domain_name(obj: ServingObject) -> str:
    """The DeepSeekServing's ComputeDomain (one for both roles of a disaggregated serving, so
    prefill and decode pods share an IMEX domain for KV transfer over multi-node NVLink)."""
    return obj.serving_name + COMPUTE_DOMAIN_SUFFIX


def channel_template_name(obj: ServingObject) -> str:
    """The ResourceClaimTemplate NVIDIA's driver generates for the ComputeDomain's channel."""
    return obj.serving_name + CHANNEL_TEMPLATE_SUFFIX


def gpu_claim_name(obj: ServingObject) -> str:
    """The ResourceClaimTemplate every pod of the DeepSeekServing claims its GPUs from."""
    return obj.name + GPU_CLAIM_SUFFIX


def render_gpu_claim_template(obj: ServingObject, res: Resolution) -> dict[str, Any]:
    """The ResourceClaimTemplate of the pods' GPUs (see :mod:`.claims`)."""
    return {
        "apiVersion": DRA_API_VERSION,
        "kind": RESOURCE_CLAIM_TEMPLATE_KIND,
        "metadata": _metadata(obj, gpu_claim_name(obj), {LABEL_COMPONENT: "gpus"}),
        "spec": claim_template_spec(res.requirement, res.gpus_per_pod),
    }


def render_compute_domain(obj: ServingObject) -> dict[str, Any]:
    """One ComputeDomain for every group of the DeepSeekServing (IMEX channels, NVIDIA DRA driver).

    One per DeepSeekServing, not per replica: every LeaderWorkerSet group shares one pod
    template, so every pod names the same ResourceClaimTemplate; the driver forms one IMEX
    domain per clique inside a ComputeDomain. ``numNodes: 0`` is the driver's recommended value
    (its IMEX daemons start without waiting for a node count).
    """
    return {
        "apiVersion": COMPUTE_DOMAIN_API_VERSION,
        "kind": COMPUTE_DOMAIN_KIND,
        "metadata": _metadata(obj, compute_domain_name(obj), {LABEL_COMPONENT: "imex"}),
        "spec": {
            "numNodes": 0,
            "channel": {"resourceClaimTemplate": {"name": channel_template_name(obj)}},
        },
    }


def render_leader_worker_set(
    obj: ServingObject, res: Resolution, replicas: int | None = None
) -> dict[str, Any]:
    """One LeaderWorkerSet: a group of ``pods_per_replica`` pods per serving replica
    (``replicas`` groups: default ``spec.replicas``).

    The leader runs the DP head (API server, ``--node-rank 0``), the workers ``--headless`` with
    their LWS worker index as node rank. ``RecreateGroupOnPodRestart``: vLLM's DP group cannot
    survive one pod restarting alone, so LWS recreates the whole group. Rolling updates replace
    one group at a time without surge (no GPUs beyond what the replicas hold).
    """
    leader_labels = {LABEL_COMPONENT: "serving", LABEL_ROLE: "head"}
    worker_labels = {LABEL_COMPONENT: "serving", LABEL_ROLE: "worker"}
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": LWS_KIND,
        # Kueue's LeaderWorkerSet integration reads the queue from the LeaderWorkerSet and
        # admits each group as one Workload (leader and workers together).
        "metadata": _metadata(obj, obj.name, {LABEL_COMPONENT: "serving", **queue_labels(obj)}),
        "spec": {
            "replicas": obj.spec.replicas if replicas is None else replicas,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0},
            },
            "leaderWorkerTemplate": {
                "size": res.pods_per_replica,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": pod_template(obj, res, PodRole(leader=True), leader_labels),
                "workerTemplate": pod_template(obj, res, PodRole(leader=False), worker_labels),
            },
        },
    }


def _multi_pod(obj: ServingObject, res: Resolution, replicas: int | None) -> list[dict[str, Any]]:
    if not res.leader_worker_set:
        return []  # never a half-rendered workload: Placeable=False says what to install
    out: list[dict[str, Any]] = []
    if res.compute_domain is ComputeDomainMode.RENDERED:
        out.append(render_compute_domain(obj))
    out.append(render_leader_worker_set(obj, res, replicas))
    out.append(render_service(obj, heads_only=True))
    return out


def render_objects(
    obj: ServingObject, res: Resolution, replicas: int | None = None
) -> list[dict[str, Any]]:
    """Every child object of the DeepSeekServing, in apply order.

    ``replicas``: the workload's replica count (plan.py's :func:`workload_size`; default
    ``spec.replicas``).
    """
    claims = [render_gpu_claim_template(obj, res)] if res.gpu_claims else []
    if res.pods_per_replica > 1:
        workload = _multi_pod(obj, res, replicas)
        return [*claims, *workload] if workload else []
    return [*claims, render_deployment(obj, res, replicas), render_service(obj)]
