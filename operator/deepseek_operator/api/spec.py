"""Pydantic models of the ``DeepSeekServing`` spec: the ONE source of the CRD's spec schema.

Field names are the API contract (docs/design.md): camelCase on the wire, snake_case in Python.
Every field's docstring becomes its ``description`` in the CRD, so ``kubectl explain`` shows it.
The types know their bounds (:mod:`.limits`), not their validator: the static cross-field rules of
:mod:`deepseek_operator.api.rules` run in the loader (:func:`~deepseek_operator.api.load.parse_spec`)
on a parsed spec, and the same rules run in the API server as CEL.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from deepseek_operator.api.backends import normalize_backend
from deepseek_operator.api.base import ApiModel
from deepseek_operator.api.core_v1 import (
    GPU_RESOURCE_RULES,
    NODE_SELECTOR_RULES,
    QUANTITY_PATTERN,
    Toleration,
)
from deepseek_operator.api.core_v1_env import EnvVar
from deepseek_operator.api.limits import MAX_REPLICAS
from deepseek_operator.api.roles import DisaggregationSpec
from deepseek_operator.api.router import RouterSpec
from deepseek_operator.api.sections import (
    CapacitySpec,
    EngineSpec,
    ModelCacheSpec,
    ModelSpec,
    ParallelismSpec,
    ResourcesSpec,
)

# The sections are re-exported: every layer imports the API's models from this module.
__all__ = [
    "CapacitySpec",
    "DeepSeekServingSpec",
    "EngineSpec",
    "ModelCacheSpec",
    "ModelSpec",
    "ParallelismSpec",
    "ResourcesSpec",
]


class DeepSeekServingSpec(ApiModel):
    """Desired state of a DeepSeek V4/V4.1 deployment served by vLLM."""

    model: ModelSpec
    """The checkpoint and its backend-deciding facts."""

    image: str = Field(min_length=1, max_length=1024)
    """vLLM container image, e.g. vllm/vllm-openai:deepseekv41-flash-0909."""

    vllm_version: str | None = Field(default=None, pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$")
    """vLLM release the image runs (e.g. 0.33.0); its backend names and guards decide. Default: the image tag when it is vX.Y.Z (vllm/vllm-openai:v0.33.0), else the newest supported release (the VLLMRelease check says which). A release the operator does not support leaves BackendResolved=False."""

    replicas: int = Field(default=1, ge=0, le=MAX_REPLICAS)
    """Independent serving replicas, each one expert-parallel group."""

    max_pending_replicas: int = Field(default=1, ge=0, le=MAX_REPLICAS)
    """Replicas beyond what the eligible nodes can hold that the workload may still ask for (they stay Pending until capacity appears). The workload asks for min(replicas, placeable + maxPendingReplicas) and never shrinks because capacity shrank. Default 1: one Pending pod lets a cluster autoscaler see the demand; 0 creates only what fits."""

    moe_backend_as_written: str = Field(
        default="auto", alias="moeBackend", min_length=1, max_length=64
    )
    """vLLM MoE backend (--moe-backend). auto lets the operator pick deep_gemm_mega_moe for DeepSeek V4.1 where every vLLM condition holds, and otherwise leaves auto to vLLM; any other vLLM MoE backend is kept verbatim and checked against vLLM's hard guards. Case and '-' are normalised like vLLM."""

    parallelism: ParallelismSpec = Field(
        default_factory=ParallelismSpec, json_schema_extra={"default": {}}
    )
    """Parallel layout (TP, PP, DP, EP, context parallel)."""

    engine: EngineSpec = Field(default_factory=EngineSpec, json_schema_extra={"default": {}})
    """Typed vLLM engine flags."""

    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=256,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """core/v1 EnvVar list passed to the vLLM container, names unique (VLLM_USE_DEEP_GEMM=0 disables automatic MegaMoE)."""

    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    """CPU/memory requests and limits of the vLLM container."""

    node_selector: dict[str, Annotated[str, Field(max_length=63)]] = Field(
        default_factory=dict, max_length=64, json_schema_extra=NODE_SELECTOR_RULES
    )
    """Restricts the candidate node pool; the operator adds its own affinity on top."""

    tolerations: list[Toleration] = Field(default_factory=list, max_length=64)
    """core/v1 Tolerations for the serving pods (GPU nodes are often tainted)."""

    gpu_resource_name: str = Field(
        default="nvidia.com/gpu",
        min_length=1,
        max_length=308,
        json_schema_extra=GPU_RESOURCE_RULES,
    )
    """Extended resource name of one GPU (a domain-qualified name such as nvidia.com/gpu, never a native resource such as cpu)."""

    gpu_allocation: Literal["auto", "devicePlugin", "dra"] = "auto"
    """How pods get their GPUs: devicePlugin (a gpuResourceName limit), dra (a ResourceClaimTemplate from the gpu.nvidia.com DeviceClass, CEL selectors encoding the decision), or auto (dra when every eligible node publishes its GPUs only in gpu.nvidia.com ResourceSlices)."""

    model_cache: ModelCacheSpec = Field(default_factory=ModelCacheSpec)
    """Model-cache volume."""

    port: int = Field(default=8000, ge=1, le=65535)
    """HTTP port of the OpenAI-compatible server and of the Service."""

    shm_size_limit: str = Field(default="32Gi", pattern=QUANTITY_PATTERN, max_length=32)
    """sizeLimit of the memory-backed /dev/shm volume (vLLM's workers exchange tensors through it); it counts against the pod's memory."""

    automount_service_account_token: bool = False
    """Mount the namespace's ServiceAccount token into the vLLM pods. vLLM never calls the Kubernetes API, so the token stays out unless you ask for it."""

    capacity: CapacitySpec = Field(default_factory=CapacitySpec, json_schema_extra={"default": {}})
    """What one replica must hold (status.capacity shows what each GPU type gives)."""

    disaggregation: DisaggregationSpec | None = None
    """Prefill/decode disaggregation: a prefill and a decode pool joined by a KV connector. Unset: one aggregated pool. When set, replicas, moeBackend, parallelism, resources and the per-role engine flags are set per role and must stay unset here."""

    queue_name: str | None = Field(
        default=None, min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    )
    """Kueue LocalQueue (in this namespace) that admits the serving's engine workloads: each Deployment and LeaderWorkerSet of the serving (both roles of a disaggregated one) carries the label kueue.x-k8s.io/queue-name with this value, so each replica starts only once Kueue admits it whole under its ClusterQueue's quota; the router, which holds no GPUs, is not queued. Needs Kueue with its pod, deployment and leaderworkerset integrations; without Kueue the label has no effect. Set it at creation: Kueue refuses a queue change on a running workload (WorkloadApplied=False says so). Unset: nothing waits for quota."""

    router: RouterSpec = Field(default_factory=RouterSpec)
    """The vLLM router in front of the engines: one OpenAI-compatible endpoint (the Service <name>-api), on by default for a disaggregated serving, opt-in for an aggregated one; NetworkPolicies admit only the router (and engineAccessFrom) to the engines' HTTP port."""

    @property
    def router_active(self) -> bool:
        """Whether the operator runs the router for this spec (its layout's default applied)."""
        return self.router.active(self.disaggregation is not None)

    @property
    def moe_backend(self) -> str:
        """spec.moeBackend normalised as vLLM does (case, '-' for '_'): what the decision reads.

        The user's spelling is the field itself (``moe_backend_as_written``), so it is part of
        the spec's identity (``model_dump_json``) and of every message and
        ``status.decision.requested``.
        """
        return normalize_backend(self.moe_backend_as_written)

    def env_value(self, name: str) -> str | None:
        """The literal value of env var ``name`` in ``spec.env`` (None when absent or valueFrom)."""
        for item in self.env:
            if item.name == name and item.value_from is None:
                return item.value or ""
        return None

    def declares_env(self, name: str) -> bool:
        """Whether ``spec.env`` sets env var ``name`` at all (literally or from valueFrom)."""
        return any(item.name == name for item in self.env)

    def for_role(self, kind: str) -> DeepSeekServingSpec:
        """The aggregated spec one role of a disaggregated spec runs: what the decision reads.

        The shared fields stay as they are (so everything the NIXL hash covers is the same in
        both roles by construction); the role's replicas, moeBackend, parallelism, resources
        and engine flags replace the aggregated ones, its extraArgs follow the shared ones
        (``--enforce-eager`` first when asked for) and ``disaggregation`` is dropped.
        """
        assert self.disaggregation is not None
        role = self.disaggregation.role(kind)
        e = role.engine
        role_args = ["--enforce-eager"] if e.enforce_eager else []
        engine = self.engine.model_copy(
            update={
                "max_num_seqs": e.max_num_seqs,
                "max_num_batched_tokens": e.max_num_batched_tokens,
                "gpu_memory_utilization": e.gpu_memory_utilization,
                "enable_dbo": e.enable_dbo,
                "ubatch_size": e.ubatch_size,
                "extra_args": [*self.engine.extra_args, *role_args, *e.extra_args],
            }
        )
        return self.model_copy(
            update={
                "replicas": role.replicas,
                "moe_backend_as_written": role.moe_backend_as_written,
                "parallelism": role.parallelism,
                "engine": engine,
                "resources": role.resources,
                "disaggregation": None,
            }
        )
