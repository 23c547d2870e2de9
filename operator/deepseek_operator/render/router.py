"""The vLLM router in front of a serving, and the NetworkPolicies that fence its engines.

The router (``vllm-router``, PyPI, :data:`~deepseek_operator.names.VLLM_ROUTER_VERSION`) finds the
engines itself: Kubernetes discovery lists and watches the pods of its namespace that carry the
labels of :func:`engine_selectors` (one selector per role in P/D mode, where it sends each
request to a prefill engine, then to a decode engine with the ``kv_transfer_params`` the prefill
returned). So it needs get/list/watch on pods in its namespace and nothing else: a Role bound to
its own ServiceAccount. Its children share one name, the client-facing Service's
(:func:`~.workload.service_name`, ``<name>-api``): each kind has its own namespace of names, and
no serving name ends in ``-api``, so no other serving's child can take it.

The NetworkPolicies (:func:`network_policies`, one per workload, one for the router) admit:

* to an engine's HTTP port: the router's pods and ``spec.router.engineAccessFrom`` (with the
  router off and no peers listed: every pod, as without a policy);
* to a prefill pod: this serving's decode pods on every port (the NIXL side channel, 5600 + DP
  rank, and the KV data path, which UCX opens on ports of its own when no RDMA is there);
* inside a multi-pod replica: the workload's own pods on every port but the side channel
  (torch.distributed, NCCL and the DP coordinator pick ports at run time);
* to the router: its port, from anywhere (it is the endpoint).

Egress is not restricted. Pure.
"""

from __future__ import annotations

from typing import Any

from deepseek_operator import names as N
from deepseek_operator.api import status as S
from deepseek_operator.api.load import ServingObject
from deepseek_operator.api.roles import ROLE_KINDS
from deepseek_operator.engine.resolution import Resolution
from deepseek_operator.names import (
    ENGINES_POLICY_SUFFIX,
    LABEL_COMPONENT,
    LABEL_ENDPOINT,
    LABEL_INSTANCE,
    LABEL_NAME,
    LABEL_ROLE,
    NIXL_SIDE_CHANNEL_PORT,
    ROUTER_APP_NAME,
    ROUTER_COMPONENT,
    ROUTER_USER,
)
from deepseek_operator.render.metadata import (
    _metadata,
    restricted_container_security,
    selector_labels,
)
from deepseek_operator.render.workload import service_name

# What a router pod requests when spec.router.resources says nothing (vllm-router is a Rust
# proxy: a few tens of MiB at rest; the prefix tree of cache_aware grows with traffic).
DEFAULT_ROUTER_REQUESTS = {"cpu": "100m", "memory": "256Mi"}
ROUTER_PROBE_PERIOD_S = 10
MAX_PORT = 65535


def router_name(serving: ServingObject) -> str:
    """The name of every router child: the serving's endpoint Service's, ``<name>-api``."""
    return service_name(serving)


def router_selector(serving: ServingObject) -> dict[str, str]:
    """Labels that select the serving's router pods (and nothing else: not an engine's)."""
    return {LABEL_NAME: ROUTER_APP_NAME, LABEL_INSTANCE: serving.serving_name}


def engine_selectors(serving: ServingObject, multi_pod: bool) -> dict[str, dict[str, str]]:
    """The labels the router discovers engines by: per role (P/D), or ``""`` (aggregated).

    A role's selector names its ``pd-role`` (which the other role's pods carry with the other
    value) and the endpoint label only HTTP-serving pods carry (a LeaderWorkerSet's headless
    workers serve no HTTP); an aggregated serving's, the serving pods (leaders only, for
    multi-pod replicas). Router pods carry another ``app.kubernetes.io/name``.
    """
    if serving.spec.disaggregation is not None:
        return {
            kind: {**selector_labels(serving.for_role(kind)), LABEL_ENDPOINT: "true"}
            for kind in ROLE_KINDS
        }
    selector = {**selector_labels(serving), LABEL_COMPONENT: "serving"}
    if multi_pod:
        selector[LABEL_ROLE] = "head"
    return {"": selector}


def _pairs(labels: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in sorted(labels.items())]


def router_args(serving: ServingObject, selectors: dict[str, dict[str, str]]) -> list[str]:
    """vllm-router's argv (after the program name): discovery of ``selectors`` in the serving's
    namespace, on the engines' HTTP port; P/D mode for a disaggregated serving."""
    spec = serving.spec
    port = str(spec.port)
    args = ["--host", "0.0.0.0", "--port", port, "--policy", spec.router.policy]
    disaggregated = spec.disaggregation is not None
    if disaggregated:
        # Only NixlConnector is modelled (spec.disaggregation.kvConnector): the pull protocol.
        args += ["--vllm-pd-disaggregation", "--kv-connector", "nixl"]
    args += [
        "--service-discovery",
        "--service-discovery-namespace",
        serving.namespace,
        "--service-discovery-port",
        port,
    ]
    if disaggregated:
        args += ["--prefill-selector", *_pairs(selectors["prefill"])]
        args += ["--decode-selector", *_pairs(selectors["decode"])]
    else:
        args += ["--selector", *_pairs(selectors[""])]
    return args


def _router_metadata(serving: ServingObject, name: str) -> dict[str, Any]:
    meta = _metadata(serving, name, {LABEL_COMPONENT: ROUTER_COMPONENT})
    meta["labels"] = {**meta["labels"], **router_selector(serving)}
    return meta


def _probe(path: str, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": ROUTER_PROBE_PERIOD_S,
        "failureThreshold": failures,
        "timeoutSeconds": 5,
    }


def router_pod_template(
    serving: ServingObject, selectors: dict[str, dict[str, str]], image: str
) -> dict[str, Any]:
    """The router pod: hardened for Pod Security "restricted" (non-root, no privilege
    escalation, every capability dropped, RuntimeDefault seccomp, read-only root), with its
    ServiceAccount's token (discovery reads pods through the API server)."""
    spec = serving.spec
    resources = spec.router.resources
    requests: dict[str, str] = {k: str(v) for k, v in resources.requests.items()}
    if not resources.requests and not resources.limits:
        requests = dict(DEFAULT_ROUTER_REQUESTS)
    limits = {k: str(v) for k, v in resources.limits.items()}
    container: dict[str, Any] = {
        "name": "router",
        "image": image,
        "command": ["vllm-router"],
        "args": router_args(serving, selectors),
        "ports": [{"name": "http", "containerPort": spec.port, "protocol": "TCP"}],
        "resources": {"requests": requests, **({"limits": limits} if limits else {})},
        # /readiness: the router has workers to route to; /liveness: the process answers.
        "readinessProbe": _probe("/readiness", 3),
        "livenessProbe": _probe("/liveness", 6),
        # The root is read-only; a small /tmp for whatever the Python launcher may write.
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        "securityContext": restricted_container_security(),
    }
    return {
        "metadata": {"labels": _router_metadata(serving, router_name(serving))["labels"]},
        "spec": {
            "serviceAccountName": router_name(serving),
            "automountServiceAccountToken": True,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": ROUTER_USER,
                "runAsGroup": ROUTER_USER,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            # No nodeSelector or tolerations of the engines': the router needs no GPU node.
            "containers": [container],
            "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
        },
    }


def render_router(
    serving: ServingObject, multi_pod: bool, default_image: str
) -> list[dict[str, Any]]:
    """The router's children in apply order: ServiceAccount, Role, RoleBinding, Deployment and
    the endpoint Service (``multi_pod``: the aggregated engines are LeaderWorkerSet groups)."""
    spec = serving.spec
    name = router_name(serving)
    selectors = engine_selectors(serving, multi_pod)
    image = spec.router.image or default_image
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _router_metadata(serving, name),
            # Only the router pod mounts the token (it says so itself).
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _router_metadata(serving, name),
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _router_metadata(serving, name),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": serving.namespace}],
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _router_metadata(serving, name),
            "spec": {
                "replicas": spec.router.replicas,
                "selector": {"matchLabels": router_selector(serving)},
                "template": router_pod_template(serving, selectors, image),
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _router_metadata(serving, name),
            "spec": {
                "type": "ClusterIP",
                "selector": router_selector(serving),
                "ports": [
                    {"name": "http", "port": spec.port, "targetPort": "http", "protocol": "TCP"}
                ],
            },
        },
    ]


def side_channel_ports(workload: ServingObject) -> tuple[int, int]:
    """The first and last NIXL side-channel port of a role's pods (5600 + every DP rank)."""
    dp = workload.spec.parallelism.data_parallel_size
    return NIXL_SIDE_CHANNEL_PORT, NIXL_SIDE_CHANNEL_PORT + dp - 1


def _peers(serving: ServingObject) -> list[dict[str, Any]]:
    return [
        p.model_dump(by_alias=True, exclude_none=True)
        for p in serving.spec.router.engine_access_from
    ]


def engine_policy(
    serving: ServingObject, workload: ServingObject, res: Resolution
) -> dict[str, Any] | None:
    """The NetworkPolicy of one workload's engine pods (``workload``: the serving, or a role's
    object), or None where nothing is to be fenced (an aggregated serving without router and
    without engineAccessFrom keeps today's open port)."""
    spec = serving.spec
    router = spec.router_active
    peers = _peers(serving)
    if spec.disaggregation is None and not router and not peers:
        return None
    http: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": spec.port}]}
    sources = (
        [{"podSelector": {"matchLabels": router_selector(serving)}}] if router else []
    ) + peers
    if sources:
        http["from"] = sources
    ingress = [http]
    if workload.role == "prefill":
        decode = selector_labels(serving.for_role("decode"))
        ingress.append({"from": [{"podSelector": {"matchLabels": decode}}]})
    if res.pods_per_replica > 1:
        own = {"podSelector": {"matchLabels": selector_labels(workload)}}
        if res.kv_transfer is not None:
            first, last = side_channel_ports(workload)
            ranges = [(1, first - 1), (last + 1, MAX_PORT)]
            ports = [
                {"protocol": proto, "port": lo, "endPort": hi}
                for lo, hi in ranges
                for proto in ("TCP", "UDP")
            ]
            ingress.append({"from": [own], "ports": ports})
        else:
            ingress.append({"from": [own]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(
            workload, workload.name + ENGINES_POLICY_SUFFIX, {LABEL_COMPONENT: "network"}
        ),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(workload)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


def router_policy(serving: ServingObject) -> dict[str, Any]:
    """The router pods' NetworkPolicy: their HTTP port open to every client, nothing else."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _router_metadata(serving, router_name(serving)),
        "spec": {
            "podSelector": {"matchLabels": router_selector(serving)},
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"protocol": "TCP", "port": serving.spec.port}]}],
        },
    }


def endpoint_status(serving: ServingObject) -> S.EndpointStatus:
    """``status.endpoint``: the Service ``<name>-api`` by its cluster DNS name and port."""
    host = f"{router_name(serving)}.{serving.namespace}.svc"
    port = serving.spec.port
    return S.EndpointStatus(
        service=router_name(serving), host=host, port=port, url=f"http://{host}:{port}"
    )


def pair_gap(serving: ServingObject) -> str | None:
    """Why a disaggregated serving cannot serve whatever is ready: one role has 0 replicas
    beside one with replicas (a prefill needs a decode to hand its KV cache to, a decode a
    prefill to pull it from). None when both have replicas, or neither does."""
    d = serving.spec.disaggregation
    if d is None:
        return None
    counts = {r.role: r.replicas for r in d.roles}
    empty = [k for k in ROLE_KINDS if counts[k] == 0]
    if len(empty) != 1:
        return None
    other = next(k for k in ROLE_KINDS if k != empty[0])
    return (
        f"{empty[0]} has 0 replicas beside {other}'s {counts[other]}: no request can complete "
        f"(set spec.disaggregation.roles[{empty[0]}].replicas, or scale both to 0)"
    )


def with_router(
    status: S.DeepSeekServingStatus,
    serving: ServingObject,
    router: S.RouterStatus | None,
    *,
    now: str,
    previous: tuple[S.Condition, ...],
) -> S.DeepSeekServingStatus:
    """``status`` with the endpoint, the router and a Ready that holds only when the router
    (``router``: None when it does not run) is ready too and the pair can serve."""
    gap = pair_gap(serving)
    conditions = []
    for cond in status.conditions:
        if cond.type == N.READY:
            if gap is not None:
                cond = _flip(cond, N.REASON_PAIR_CANNOT_SERVE, gap, now, previous)
            elif (
                cond.status == "True"
                and router is not None
                and router.ready_replicas < router.replicas
            ):
                message = (
                    f"router {router_name(serving)}: {router.ready_replicas}/{router.replicas} "
                    f"pods ready; engines: {cond.message}"
                )
                cond = _flip(cond, N.REASON_ROUTER_NOT_READY, message, now, previous)
        conditions.append(cond)
    has_endpoint = serving.spec.disaggregation is None or router is not None
    return status.model_copy(
        update={
            "endpoint": endpoint_status(serving) if has_endpoint else None,
            "router": router,
            "conditions": conditions,
        }
    )


def _flip(
    cond: S.Condition, reason: str, message: str, now: str, previous: tuple[S.Condition, ...]
) -> S.Condition:
    """``cond`` turned False with ``reason``; its transition time kept from the last written
    Ready when that was False already."""
    since = next(
        (
            c.last_transition_time
            for c in previous
            if c.type == cond.type and c.status == "False" and c.last_transition_time
        ),
        now,
    )
    return cond.model_copy(
        update={
            "status": "False",
            "reason": reason,
            "message": message,
            "last_transition_time": since,
        }
    )
