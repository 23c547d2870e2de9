"""Pydantic models of the ``DeepSeekServing`` status, and the condition/reason constants.

The operator writes exactly this shape, and ``render -o json`` prints it, so users can preview
what ``kubectl get dss -o yaml`` will show. There is no ``phase``: conditions carry the state.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from deepseek_operator.api.backends import normalize_backend
from deepseek_operator.api.base import ApiModel


class Check(ApiModel):
    """One rule of the decision, with the values it observed."""

    name: str
    """CamelCase rule name, e.g. GPUArchitecture."""

    passed: bool
    """Whether the rule holds."""

    message: str
    """What was observed, with the actual values."""

    rule: str = ""
    """Id of the rule in vLLM's decision list (R2-R14 for auto, A1-A10 for explicit MegaMoE)."""


class Decision(ApiModel):
    """Why the backend was chosen."""

    requested: str
    """spec.moeBackend as the user wrote it."""

    reason: str
    """CamelCase constant: MegaMoESelected, KeptAuto, Explicit or <Check>Failed."""

    message: str = ""
    """One sentence explaining the decision."""

    checks: list[Check] = Field(default_factory=list)
    """One entry per rule, in evaluation order."""


class Resolved(ApiModel):
    """The values the operator rendered."""

    moe_backend: str
    """Value rendered into --moe-backend ("auto" when left to vLLM)."""

    sequence_parallel: bool
    """DeepSeek V4 sequence parallelism as vLLM will compute it (PP == 1, EP, TP > 1, and a MegaMoE backend or DP > 1)."""

    expert_parallel_size: int
    """Expert-parallel group size (TP x DP when expert parallel is on, else 1)."""

    gpus_per_pod: int
    """GPUs each pod requests (TP x PP x local DP x PCP)."""

    pods_per_replica: int = 1
    """Pods per serving replica (more than 1 for multi-node replicas)."""

    eligible_nodes: int = 0
    """Nodes where the decision holds and the pod fits."""

    clique_label: str | None = None
    """Multi-pod replicas on multi-node NVLink trays: the node label naming the NVLink clique each group is confined to (nvidia.com/gpu.clique or gpu.deepseek-operator.io/mnnvl.clique)."""

    nvlink_cliques: list[str] | None = None
    """NVLink cliques (<ClusterUUID>.<CliqueId>) whose eligible nodes can hold a whole multi-pod group."""
    vllm_version: str = ""
    """vLLM release whose rules decided (spec.vllmVersion, the image tag vX.Y.Z, or the newest supported)."""

    @field_validator("moe_backend")
    @classmethod
    def _normalise_moe_backend(cls, value: str) -> str:
        # A status read back (or edited by hand) compares with decisions in vLLM's spelling.
        return normalize_backend(value)


class Condition(ApiModel):
    """A metav1.Condition."""

    type: str
    """Condition type: BackendResolved, Placeable, Ready or (multi-node NVLink replicas) ComputeDomain."""

    status: Literal["True", "False", "Unknown"]
    """True, False or Unknown."""

    reason: str
    """CamelCase reason."""

    message: str
    """Human-readable details with the observed values."""

    observed_generation: int = 0
    """metadata.generation the condition was computed for."""

    last_transition_time: str = ""
    """RFC 3339 time the status last changed."""


class GroupStatus(ApiModel):
    """One multi-pod replica (a LeaderWorkerSet group) as its pods show it."""

    index: int
    """The group's index in the LeaderWorkerSet (leaderworkerset.sigs.k8s.io/group-index)."""

    leader_pod: str = ""
    """Name of the group's leader pod (the DP head); empty until it exists."""

    clique: str | None = None
    """NVLink clique (<ClusterUUID>.<CliqueId>) of the nodes the group's pods run on; absent while no pod is scheduled or the nodes are in no clique. Several cliques, joined by ", ", would mean a group straddles cliques."""

    nodes: list[str] = Field(default_factory=list)
    """Node of each pod in worker-index order (leader first); empty string while a pod is unscheduled."""

    pods_ready: int = 0
    """Pods of the group that are Ready."""

    pods_total: int = 0
    """Pods the group has (pods per replica)."""


class LayoutOptionStatus(ApiModel):
    """Another split of the same GPUs per replica that the decision rules accept, and what it holds."""

    tensor_parallel_size: int
    """parallelism.tensorParallelSize of this layout."""

    data_parallel_size: int
    """parallelism.dataParallelSize of this layout."""

    expert_parallel: bool
    """parallelism.expertParallel of this layout."""

    concurrent_requests: str
    """Requests at maxModelLen one replica of this layout holds on this GPU type."""

    kv_layout: str = ""
    """Whose KV cache groups the figure is from (V4.1: the attention class the layout implies)."""

    chosen: bool = False
    """The layout the spec asks for (the operator never changes it)."""


class CapacityStatus(ApiModel):
    """What one replica leaves for the KV cache on one GPU type, as the capacity model computes it."""

    gpu_product: str
    """GPU product (nvidia.com/gpu.product) of the nodes the replica may land on."""

    gpu_memory_mib: int
    """Memory per GPU in MiB, and where it was read: see gpuMemorySource."""

    gpu_memory_source: str = ""
    """The label the memory was read from, or the catalog's product memory."""

    backend: str
    """The MoE path the figures are for: deep_gemm_mega_moe or FusedMoE (vLLM's auto)."""

    weights_gib: str
    """Weight bytes per GPU in GiB (two decimals)."""

    symmetric_buffer_gib: str = "0.00"
    """MegaMoE's symmetric buffer per GPU in GiB (sized by maxNumBatchedTokens)."""

    kv_cache_gib: str
    """KV-cache room per GPU in GiB at gpuMemoryUtilization (or the fixed engine.kvCacheMemoryBytes); negative when the weights alone do not fit."""

    tokens: int
    """Tokens the replica's KV cache holds: concurrentRequests x maxModelLen, as vLLM logs it."""

    concurrent_requests: str
    """Requests at maxModelLen the replica holds (every DP rank has its own pool; TP replicates KV)."""

    max_model_len: int
    """The context length the figures are for (engine.maxModelLen or the model's)."""

    layouts: list[LayoutOptionStatus] | None = None
    """The TP / DP / EP splits of the same GPUs per replica that the decision rules accept, the chosen one included, best first (single-pod replicas without pipeline or context parallelism)."""


class EndpointStatus(ApiModel):
    """The serving's one OpenAI-compatible endpoint: its Service."""

    service: str
    """Name of the Service (<name>-api), in the serving's namespace."""

    host: str
    """Its cluster DNS name, <service>.<namespace>.svc."""

    port: int
    """Its port (spec.port)."""

    url: str
    """http://<host>:<port>: append /v1/chat/completions, /v1/completions or /v1/models."""


class RouterStatus(ApiModel):
    """The vLLM router's Deployment as the cluster shows it."""

    replicas: int = 0
    """Router pods asked for (spec.router.replicas)."""

    ready_replicas: int = 0
    """Router pods ready (they have engines to route to)."""

    image: str = ""
    """The router image running (spec.router.image or the operator's default)."""


class WeightsStatus(ApiModel):
    """The fill of the cache volume (spec.modelCache.fill), as its Job's pod last reported it."""

    job: str
    """The fill Job (in the serving's namespace), shared by every serving of the same claim, model and revision."""

    bytes_done: int = 0
    """Bytes of the checkpoint on the volume."""

    bytes_total: int = 0
    """Bytes of the checkpoint (the hub's file list); 0 until the fill has listed it."""

    files_done: int = 0
    """Files of the checkpoint on the volume."""

    files_total: int = 0
    """Files of the checkpoint."""

    eta_seconds: int | None = None
    """Seconds left at the rate measured between the last two reports (unset until the rate is known)."""

    observed_at: str = ""
    """When the operator last read the progress (RFC 3339): the ETA's rate is measured from it."""

    progress: str = ""
    """One line for kubectl get: GiB done/total, files done/total, ETA."""


class RoleStatus(ApiModel):
    """One role of a disaggregated serving: its decision, replicas and conditions."""

    role: str
    """prefill or decode."""

    resolved: Resolved | None = None
    """The role's rendered choices (backend, sequence parallelism, layout)."""

    decision: Decision | None = None
    """The role's decision and its checks (KV-transfer checks included)."""

    replicas: int = 0
    """Desired replicas of this role."""

    ready_replicas: int = 0
    """Replicas of this role whose pods are all ready."""

    capacity: list[CapacityStatus] | None = None
    """The role's KV-cache capacity per GPU type."""

    groups: list[GroupStatus] | None = None
    """The role's multi-pod replicas (its LeaderWorkerSet groups): leader pod, clique, nodes, pods ready."""

    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """BackendResolved, Placeable and Ready of this role (ComputeDomain for multi-node NVLink groups); the top-level conditions sum both roles up."""


class DeepSeekServingStatus(ApiModel):
    """Observed state written by the operator."""

    observed_generation: int = 0
    """metadata.generation the status reflects."""

    resolved: Resolved | None = None
    """The rendered choices."""

    decision: Decision | None = None
    """The decision and its checks."""

    replicas: int = 0
    """Desired serving replicas."""

    ready_replicas: int = 0
    """Replicas whose pods are all ready."""

    capacity: list[CapacityStatus] | None = None
    """Per GPU type the replica may land on: weights, MegaMoE buffer, KV room per GPU, tokens and concurrent requests at maxModelLen (the KVCacheCapacity check says whether they suffice)."""

    groups: list[GroupStatus] | None = None
    """Multi-pod replicas: one entry per LeaderWorkerSet group that has pods, by group index: its leader pod, NVLink clique, nodes and pods ready. The Ready condition's message sums them up."""

    endpoint: EndpointStatus | None = None
    """Where clients send requests: the Service <name>-api (the router's when it runs, else the engines'). Unset for a disaggregated serving without router (your gateway is the endpoint)."""

    router: RouterStatus | None = None
    """The vLLM router, when it runs (spec.router): its replicas and how many are ready. Ready is True only when the router is ready too."""

    roles: list[RoleStatus] | None = Field(
        default=None,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["role"]},
    )
    """A disaggregated serving: one entry per role (prefill, decode) with its own decision, replicas and conditions; resolved, decision and capacity above stay unset."""

    weights: WeightsStatus | None = None
    """spec.modelCache.fill: the fill Job and its progress (the WeightsReady condition says whether it is done)."""

    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """BackendResolved, Placeable and Ready; ComputeDomain for multi-node NVLink replicas; WeightsReady with spec.modelCache.fill."""
