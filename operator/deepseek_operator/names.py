"""Every Kubernetes-facing string of the project, in one place.

The API group and kind, the label and annotation keys the operator writes on its children, the
node labels it reads (GPU Feature Discovery's and the node agent's), condition types and reasons,
event reasons, field managers and fixed ports. Changing a value here changes the contract with
clusters that already run the operator, so a value is renamed only on purpose.
This module imports nothing from the project: every layer may import it.
"""

from __future__ import annotations

PROJECT = "deepseek-operator"
"""The project's name as it appears in labels, field managers and the peering object."""

# --- the DeepSeekServing API -----------------------------------------------------------------

GROUP = "serving.deepseek-operator.io"
VERSION = "v1alpha1"
KIND = "DeepSeekServing"
PLURAL = "deepseekservings"
SINGULAR = "deepseekserving"
SHORT_NAMES = ["dss"]
CATEGORIES = ["deepseek"]
API_VERSION = f"{GROUP}/{VERSION}"
CRD_NAME = f"{PLURAL}.{GROUP}"
CRD_FILENAME = f"{GROUP}_{PLURAL}.yaml"

# --- labels and annotations on the operator's children ---------------------------------------

MANAGED_BY = PROJECT
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_SERVING = f"{GROUP}/name"
LABEL_ROLE = f"{GROUP}/role"
ANNOTATION_BACKEND = f"{GROUP}/moe-backend"
ANNOTATION_SEQUENCE_PARALLEL = f"{GROUP}/sequence-parallel"
SERVING_APP_NAME = "deepseek-serving"
"""``app.kubernetes.io/name`` of the serving pods."""

UNRUNNABLE_KEY = f"{GROUP}/backend-unrunnable"
"""A node label no node carries: pods of an unrunnable backend are pinned to it (stay Pending)."""

KOPF_ANNOTATION_PREFIX = GROUP
"""Prefix of kopf's progress and diff-base annotations on DeepSeekServings."""

# --- field managers and ports ------------------------------------------------------------------

FIELD_MANAGER = PROJECT
"""Server-side apply field manager of the operator."""
AGENT_FIELD_MANAGER = f"{PROJECT}-agent"
"""Field manager of the node agent's label patches."""
DEFAULT_PEERING = PROJECT
"""Default ClusterKopfPeering name (HA)."""
DP_RPC_PORT = 13345
"""vLLM's ``--data-parallel-rpc-port`` on the head pod of a multi-pod replica."""
NIXL_SIDE_CHANNEL_PORT = 5600
"""vLLM's ``VLLM_NIXL_SIDE_CHANNEL_PORT`` default: each engine listens on it + its DP rank."""

# --- prefill/decode disaggregation -------------------------------------------------------------

LABEL_PD_ROLE = f"{GROUP}/pd-role"
"""prefill or decode, on every child and pod of a disaggregated serving's role (selectors)."""
LLM_D_ROLE_LABEL = "llm-d.ai/role"
LABEL_ENDPOINT = f"{GROUP}/endpoint"
"""``"true"`` on a disaggregated role's pods that serve HTTP (not the headless LWS workers)."""
INFERENCE_POOL_API_VERSION = "inference.networking.k8s.io/v1"
INFERENCE_POOL_KIND = "InferencePool"
"""Gateway API Inference Extension's pool of model servers, read by its endpoint picker."""
ANNOTATION_TEMPLATE_HASH = f"{GROUP}/pod-template-hash"
"""On a role's workload: a hash of its pod template(s), so a change says which pools roll."""
EVENT_ROLLING = "RollingPools"
"""Normal event: a spec change rolls a disaggregated serving's prefill pool, decode pool or both."""
"""The pod label llm-d's endpoint picker reads to tell prefill from decode pods."""
NIXL_SIDE_CHANNEL_HOST_ENV = "VLLM_NIXL_SIDE_CHANNEL_HOST"
NIXL_SIDE_CHANNEL_PORT_ENV = "VLLM_NIXL_SIDE_CHANNEL_PORT"
UCX_TLS_ENV = "UCX_TLS"
UCX_MNNVL_ENV = "UCX_CUDA_IPC_ENABLE_MNNVL"
UCX_TLS = "cuda_ipc,rc,cuda_copy"
"""UCX transports for KV transfer: rc (RDMA) must be there, or NIXL falls back to TCP."""

# --- the vLLM router (vllm-router, PyPI) in front of a serving ---------------------------------

VLLM_ROUTER_VERSION = "0.1.17"
"""The vllm-router release the operator renders flags for and its router image installs."""
ROUTER_APP_NAME = "deepseek-router"
"""``app.kubernetes.io/name`` of the router pods (never the serving pods' name: no selector of
the engines' Services, NetworkPolicies or the router's own discovery can match a router pod)."""
ROUTER_COMPONENT = "router"
"""``app.kubernetes.io/component`` of the router's children."""
DEFAULT_ROUTER_IMAGE = f"{PROJECT}-router:{VLLM_ROUTER_VERSION}"
"""The router image when neither spec.router.image nor the operator's --router-image says one."""
ROUTER_USER = 65532
"""The numeric non-root user and group of the router image (the Dockerfile's ``deepseek``)."""
REASON_ROUTER_NOT_READY = "RouterNotReady"
"""Ready is False: every engine is ready but the router (the one endpoint) is not."""
REASON_PAIR_CANNOT_SERVE = "PairCannotServe"
"""Ready is False: one role of a disaggregated serving has 0 replicas beside one with replicas,
so no request can complete (a prefill needs a decode to hand its KV cache to, and back)."""

# --- names of a serving's children: the one scheme ---------------------------------------------
#
# Every object the operator writes for DeepSeekServing <n> (and every object LeaderWorkerSet
# names after one of ours) is named <n> + a suffix of CHILD_NAMES, per kind. A workload's
# children (WORKLOAD_CHILDREN) are named after the workload: <n> for an aggregated serving,
# <n>-<role> for each role of a disaggregated one; the serving-wide ones (SERVING_CHILDREN) after
# <n>. Names are unique per kind, so two servings <a> and <b> = <a> + u take one name exactly
# when t1 = u + t2 for two suffixes t1, t2 of one kind; RESERVED_NAME_ENDINGS is every such u,
# computed, and admission refuses a serving name that ends in one (api/rules/values.py). A new
# child: add its (kind, suffix) below and run `make generate` (the CRD's CEL rule follows).
# Renaming a child renames it in every running serving (and rolls its pods): never casually.

SERVICE_SUFFIX = "-api"
"""The client-facing Service ``<workload>-api`` (LeaderWorkerSet takes ``<workload>`` for its
headless Service, through which workers reach their leader)."""
GPU_CLAIM_SUFFIX = "-gpus"
"""The ResourceClaimTemplate ``<workload>-gpus`` the pods claim their GPUs from (DRA)."""
COMPUTE_DOMAIN_SUFFIX = "-imex"
"""The serving's ComputeDomain ``<n>-imex`` (one for both roles)."""
CHANNEL_TEMPLATE_SUFFIX = "-imex-channel"
"""The ResourceClaimTemplate NVIDIA's DRA driver names after the ComputeDomain's channel."""
ENGINES_POLICY_SUFFIX = "-engines"
"""The NetworkPolicy ``<workload>-engines`` that fences a workload's vLLM pods."""
PD_ROLE_NAMES = ("prefill", "decode")
"""The roles of a disaggregated serving; role <r>'s workload is named ``<n>-<r>``."""

WORKLOAD_CHILDREN: tuple[tuple[str, str], ...] = (
    ("Deployment", ""),
    ("LeaderWorkerSet", ""),
    ("Service", ""),  # LeaderWorkerSet's headless Service, named after the LeaderWorkerSet
    ("Service", SERVICE_SUFFIX),
    ("ResourceClaimTemplate", GPU_CLAIM_SUFFIX),
    ("NetworkPolicy", ENGINES_POLICY_SUFFIX),
)
"""(kind, suffix after the workload's name) of every child named after a workload."""
SERVING_CHILDREN: tuple[tuple[str, str], ...] = (
    ("ComputeDomain", COMPUTE_DOMAIN_SUFFIX),
    ("ResourceClaimTemplate", CHANNEL_TEMPLATE_SUFFIX),
    ("InferencePool", ""),
    # The router's children all take the endpoint Service's name (render/router.py).
    *(
        (kind, SERVICE_SUFFIX)
        for kind in ("Deployment", "ServiceAccount", "Role", "RoleBinding", "NetworkPolicy")
    ),
)
"""(kind, suffix after the serving's name) of every serving-wide child (a disaggregated
serving's, or one per serving whatever its layout)."""


def _child_names() -> tuple[tuple[str, str], ...]:
    roles = tuple(
        (kind, f"-{role}{suffix}") for role in PD_ROLE_NAMES for kind, suffix in WORKLOAD_CHILDREN
    )
    return tuple(dict.fromkeys(WORKLOAD_CHILDREN + roles + SERVING_CHILDREN))


CHILD_NAMES: tuple[tuple[str, str], ...] = _child_names()
"""(kind, suffix after the serving's name) of every child any serving may have, either layout."""


def _reserved_endings(children: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """Every u with t1 = u + t2 for suffixes t1 != t2 of one kind, shortest first, leaving out
    those that end in a shorter one (refusing the shorter ending refuses them too)."""
    found = {
        t1[: len(t1) - len(t2)]
        for kind, t1 in children
        for other, t2 in children
        if other == kind and t1 != t2 and t1.endswith(t2)
    }
    # A serving name ends in a letter or digit: an ending ending in "-" can never be one's.
    found = {u for u in found if u and not u.endswith("-")}
    kept: list[str] = []
    for u in sorted(found, key=lambda e: (len(e), e)):
        if not any(u.endswith(k) for k in kept):
            kept.append(u)
    return tuple(kept)


RESERVED_NAME_ENDINGS: tuple[str, ...] = _reserved_endings(CHILD_NAMES)
"""Endings a serving name may not have: with one, some child of the serving <n> minus that
ending would take a name of one of its children (today ``-api``, ``-decode``, ``-prefill``)."""


def role_object_name(serving: str, role: str) -> str:
    """The name of role ``role``'s workload of disaggregated serving ``serving``."""
    return f"{serving}-{role}"


# --- LeaderWorkerSet (sigs.k8s.io/lws) and NVIDIA's ComputeDomain (DRA driver for GPUs) ---------

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_KIND = "LeaderWorkerSet"
LWS_INSTALL_HINT = (
    "install the LeaderWorkerSet controller (https://lws.sigs.k8s.io, e.g. "
    "`helm install lws oci://registry.k8s.io/lws/charts/lws --namespace lws-system "
    "--create-namespace`)"
)
"""How a user gets LeaderWorkerSet, quoted where a multi-pod replica needs it."""
LWS_GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
"""Set by LWS's pod webhook on every pod of a group (one value per group)."""
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
"""Set by LWS on every pod of a group: the group's index, the pod's index in it (0: leader)."""
LWS_LEADER_ADDRESS_ENV = "LWS_LEADER_ADDRESS"
LWS_WORKER_INDEX_ENV = "LWS_WORKER_INDEX"
"""Environment LWS injects into every container of a group (0 on the leader)."""
COMPUTE_DOMAIN_API_VERSION = "resource.nvidia.com/v1beta1"
COMPUTE_DOMAIN_KIND = "ComputeDomain"
COMPUTE_DOMAIN_CLAIM = "imex-channel"
"""Pod resource-claim name of the IMEX channel from the replica's ComputeDomain."""
DRA_API_VERSION = "resource.k8s.io/v1"
RESOURCE_SLICE_KIND = "ResourceSlice"
RESOURCE_CLAIM_TEMPLATE_KIND = "ResourceClaimTemplate"
DRA_GPU_DRIVER = "gpu.nvidia.com"
"""NVIDIA's DRA driver for whole GPUs: the ResourceSlice driver and the DeviceClass name."""

# --- Kueue (sigs.k8s.io/kueue): quota and all-or-nothing admission ----------------------------

KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
"""The Workload API the operator reads (served by Kueue v0.15 and later)."""
KUEUE_WORKLOAD_KIND = "Workload"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""Kueue's label naming the LocalQueue a Deployment or LeaderWorkerSet is admitted through."""
KUEUE_PAIR_CHECK_CONTROLLER = "serving.deepseek-operator.io/pd-pair"
"""The controllerName of the Kueue AdmissionCheck the operator serves: a P/D pair admitted whole."""
KUEUE_INSTALL_HINT = (
    "install Kueue (https://kueue.sigs.k8s.io) with its pod, deployment and "
    "leaderworkerset.x-k8s.io/leaderworkerset integrations"
)
"""How a user gets Kueue, quoted where spec.queueName needs it."""

# --- node labels: GPU Feature Discovery (NVIDIA k8s-device-plugin) ---------------------------

GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_COUNT = "nvidia.com/gpu.count"
GFD_CC_MAJOR = "nvidia.com/gpu.compute.major"
GFD_CC_MINOR = "nvidia.com/gpu.compute.minor"
GFD_MEMORY = "nvidia.com/gpu.memory"
GFD_CLIQUE = "nvidia.com/gpu.clique"
GFD_FAMILY = "nvidia.com/gpu.family"
GFD_PRESENT = "nvidia.com/gpu.present"
GFD_TIMESTAMP = "nvidia.com/gfd.timestamp"
"""Rewritten by GFD on every pass; carries no GPU fact, so node changes ignore it."""

# --- node labels: our node agent (docs/node-facts.md) --------------------------------------

AGENT_PREFIX = "gpu.deepseek-operator.io/"
"""The agent writes only keys under this prefix."""
AGENT_PRESENT = AGENT_PREFIX + "present"
AGENT_PRODUCT = AGENT_PREFIX + "product"
AGENT_COUNT = AGENT_PREFIX + "count"
AGENT_CC = AGENT_PREFIX + "cc"
AGENT_SM_FAMILY = AGENT_PREFIX + "sm-family"
AGENT_MEMORY_MIB = AGENT_PREFIX + "memory-mib"
AGENT_DRIVER = AGENT_PREFIX + "driver"
AGENT_CUDA = AGENT_PREFIX + "cuda"
AGENT_NVLINK_FULLY_CONNECTED = AGENT_PREFIX + "nvlink.fully-connected"
AGENT_NVLINK_DOMAIN_SIZE = AGENT_PREFIX + "nvlink.domain-size"
AGENT_NVLINK_SWITCH = AGENT_PREFIX + "nvlink.switch"
AGENT_NVLINK_LINKS = AGENT_PREFIX + "nvlink.links"
AGENT_MNNVL_CLIQUE = AGENT_PREFIX + "mnnvl.clique"
AGENT_MNNVL_DOMAIN = AGENT_PREFIX + "mnnvl.domain"
AGENT_MNNVL_STATE = AGENT_PREFIX + "mnnvl.state"
MNNVL_STATE_READY = "ready"
"""The agent's ``mnnvl.state`` when the fabric is complete and healthy (others: pending, degraded, none)."""
AGENT_MIG = AGENT_PREFIX + "mig"
AGENT_TOPOLOGY_ANNOTATION = AGENT_PREFIX + "topology"
"""One JSON annotation with the pairwise P2P-NVLink matrix (docs/node-facts.md)."""
TRISTATE_VALUES = ("true", "false", "unknown")

# --- condition types (docs/design.md) ----------------------------------------------------------

BACKEND_RESOLVED = "BackendResolved"
"""The MoE backend was decided and can run on at least one candidate node."""
PLACEABLE = "Placeable"
"""Enough eligible nodes exist for every replica's expert-parallel group."""
READY = "Ready"
"""All replicas' pods are ready (summary, positive polarity)."""
WORKLOAD_APPLIED = "WorkloadApplied"
"""The API server accepted every child object the operator wrote (False carries its refusal)."""
ADMITTED = "Admitted"
"""Only with spec.queueName: Kueue admitted every replica's Workload (docs/kueue.md)."""

# --- condition and decision reasons ----------------------------------------------------------

REASON_MEGA_MOE_SELECTED = "MegaMoESelected"
"""auto became deep_gemm_mega_moe: every vLLM condition holds on the eligible nodes."""
REASON_KEPT_AUTO = "KeptAuto"
"""auto stays auto (vLLM picks its FusedMoE backend); the decision's reason names the failed check."""
REASON_EXPLICIT = "Explicit"
"""The user's explicit backend is kept and vLLM's hard guards hold."""
REASON_ROLES_RESOLVED = "RolesResolved"
"""BackendResolved of a disaggregated serving: every role's backend was decided and can run."""
REASON_ENOUGH_NODES = "EnoughNodes"
"""Eligible nodes can hold every replica."""
REASON_INSUFFICIENT_NODES = "InsufficientNodes"
"""Too few eligible nodes (or GPUs) for all replicas."""
REASON_ALL_REPLICAS_READY = "AllReplicasReady"
"""Every replica has its pods ready."""
REASON_REPLICAS_NOT_READY = "ReplicasNotReady"
"""Some replicas are not ready yet (loading weights can take tens of minutes)."""
REASON_NOT_PLACEABLE = "NotPlaceable"
"""Ready is False because the workload cannot be placed."""
REASON_BACKEND_UNRUNNABLE = "BackendUnrunnable"
"""Ready is False because the explicit backend cannot run anywhere."""
REASON_LWS_NOT_INSTALLED = "LeaderWorkerSetNotInstalled"
"""Placeable is False: a multi-pod replica needs the LeaderWorkerSet CRD, which the cluster lacks."""
COMPUTE_DOMAIN = "ComputeDomain"
"""Condition (multi-pod replicas on multi-node NVLink trays only): each pod gets an IMEX channel."""
REASON_COMPUTE_DOMAIN_RENDERED = "ComputeDomainRendered"
REASON_DRA_DRIVER_MISSING = "DRADriverNotInstalled"
REASON_COMPUTE_DOMAIN_DISABLED = "ComputeDomainDisabled"
REASON_INVALID_SPEC = "InvalidSpec"
"""The spec breaks a static rule (normally stopped by the API server's CEL rules)."""
REASON_APPLIED = "Applied"
"""WorkloadApplied is True: the API server accepted every child object."""
REASON_WORKLOAD_REFUSED = "WorkloadRefused"
"""The API server refused a child object; the message is its own words (retried with backoff)."""
REASON_FOREIGN_OBJECT = "ForeignObjectInTheWay"
"""WorkloadApplied is False: an object with a child's name exists and is not this
DeepSeekServing's (another controller's, or nobody's); the operator never writes over it."""
REASON_PODS_REFUSED = "PodsRefused"
"""A child's controller cannot create pods (FailedCreate, e.g. Pod Security admission)."""
REASON_KUEUE_ADMITTED = "Admitted"
"""Admitted is True: Kueue admitted every Workload of the serving (or of the role)."""
REASON_KUEUE_NOT_INSTALLED = "KueueNotInstalled"
"""Admitted is True: spec.queueName is set but the cluster serves no Kueue; nothing waits."""
REASON_KUEUE_NO_WORKLOAD = "NoWorkloadYet"
"""Admitted is False: Kueue has not yet made a Workload for every replica."""
REASON_KUEUE_PENDING = "Pending"
"""Admitted is False: a Workload waits for quota (the message is Kueue's)."""
REASON_KUEUE_QUOTA_RESERVED = "QuotaReserved"
"""Admitted is False: quota is reserved, Kueue's admission checks are pending."""
REASON_KUEUE_EVICTED = "Evicted"
"""Admitted is False: Kueue evicted a Workload (preempted, or its quota shrank)."""
REASON_WAITING_FOR_QUOTA = "WaitingForQuota"
"""Ready is False because Kueue has not admitted every replica (see Admitted)."""


def failed_reason(check_name: str) -> str:
    """Reason for a decision that stopped at ``check_name``, e.g. ``GPUArchitectureFailed``."""
    return f"{check_name}Failed"


# --- event reasons -----------------------------------------------------------------------------

EVENT_BACKEND_RESOLVED = BACKEND_RESOLVED
"""Normal event: a runnable decision was made or changed."""
EVENT_BACKEND_UNRUNNABLE = REASON_BACKEND_UNRUNNABLE
"""Warning event: the decided (explicit) backend cannot run on any candidate node."""
EVENT_INVALID_SPEC = REASON_INVALID_SPEC
"""Warning event: the spec breaks a static rule."""
EVENT_WORKLOAD_REFUSED = REASON_WORKLOAD_REFUSED
"""Warning event: the API server refused a child object (its message is in the event)."""
EVENT_FOREIGN_OBJECT = REASON_FOREIGN_OBJECT
"""Warning event: a child's name is taken by an object the operator does not own."""

# --- the operator-managed weights fill (spec.modelCache.fill, docs/weights.md) ---------------

WEIGHTS_READY = "WeightsReady"
"""Condition (spec.modelCache.fill only): the checkpoint is in the cache; no vLLM pod before."""
REASON_WEIGHTS_FILLED = "Filled"
REASON_WEIGHTS_FILLING = "Filling"
REASON_WEIGHTS_PENDING = "FillPending"
REASON_WEIGHTS_RETRYING = "FillRetrying"
REASON_WEIGHTS_CACHE_TOO_SMALL = "CacheTooSmall"
REASON_WEIGHTS_CLAIM_MISSING = "ClaimNotFound"
REASON_WEIGHTS_REVISION_REQUIRED = "RevisionRequired"
REASON_WEIGHTS_NOT_READY = "WeightsNotReady"
"""Ready is False (spec.modelCache.fill): no vLLM pod yet, the weights are not in the cache."""
REASON_WEIGHTS_FAILED = "FillFailed"
"""WeightsReady is False: the fill Job failed; the message names the cause (exit code)."""
FILL_COMPONENT = "weights-fill"
"""``app.kubernetes.io/component`` of a fill Job and its pod."""
FILL_CONTAINER = "fill"
"""The fill Job's one container (the name its logs and terminated state are read under)."""
FILL_JOB_PREFIX = "weights-"
"""Fill Jobs are named ``weights-<model basename>-<hash of claim, model, revision>``."""
FILL_USER = 65532
"""The numeric non-root user and group of the operator image (the Dockerfile's ``deepseek``)."""
DEFAULT_FILL_IMAGE = f"{PROJECT}:latest"
"""The image of fill Jobs when the operator's ``run --fill-image`` says none (the chart passes
the operator's own image)."""
FILL_EXIT_CODES = {
    "failed": 1,
    "bad-input": 2,
    "token-rejected": 3,
    "gated": 4,
    "not-found": 5,
    "no-space": 6,
    "checksum": 7,
    "network": 8,
    "busy": 9,
}
"""``fill-weights`` cause -> exit code: a fill Job's exit code alone names its cause."""
FILL_FATAL_CAUSES = ("bad-input", "token-rejected", "gated", "not-found", "no-space", "checksum")
"""Causes a retry does not cure: the fill Job's podFailurePolicy fails the Job at once."""
