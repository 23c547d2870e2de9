"""Pydantic models of the ``DeepSeekServing`` spec: the ONE source of the CRD's spec schema.

Field names are the API contract (docs/design.md): camelCase on the wire, snake_case in Python.
Every field's docstring becomes its ``description`` in the CRD, so ``kubectl explain`` shows it.
The types know their bounds (:mod:`.limits`), not their validator: the static cross-field rules of
:mod:`deepseek_operator.api.rules` run in the loader (:func:`~deepseek_operator.api.load.parse_spec`)
on a parsed spec, and the same rules run in the API server as CEL.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)
from pydantic.alias_generators import to_camel

from deepseek_operator.api.backends import normalize_backend
from deepseek_operator.api.core_v1 import (
    CLAIM_NAME_RULES,
    GPU_RESOURCE_RULES,
    MOUNT_PATH_RULES,
    NODE_SELECTOR_RULES,
    QUANTITY_PATTERN,
    RESOURCES_RULES,
    Amount,
    Toleration,
)
from deepseek_operator.api.core_v1_env import EnvVar
from deepseek_operator.api.limits import INT32_MAX, MAX_PARALLEL_SIZE, MAX_REPLICAS


class ApiModel(BaseModel):
    """Base of every API model: camelCase aliases, attribute docstrings as descriptions."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
        frozen=True,
    )


class ModelSpec(ApiModel):
    """The checkpoint to serve and the facts about it that decide the MoE backend."""

    name: str = Field(min_length=1, max_length=1024)
    """Hugging Face model id (e.g. deepseek-ai/DeepSeek-V4.1-Flash) or a path inside the image or the model-cache volume. Known names fill the facts below from the built-in catalog."""

    revision: str | None = Field(default=None, max_length=256)
    """Model revision (a commit hash, branch or tag) passed as --revision."""

    served_model_name: str | None = Field(default=None, max_length=256)
    """Name clients use in API requests (--served-model-name); defaults to the model name."""

    architecture: str | None = Field(default=None, max_length=256)
    """HF architecture, e.g. DeepseekV41ForCausalLM. Required for checkpoints the catalog does not know; overrides the catalog when set."""

    expert_dtype: Literal["fp4", "fp8"] | None = None
    """Data type of the routed experts: fp4 (MXFP4, MegaMoE-capable) or fp8."""

    scoring_func: str | None = Field(default=None, max_length=64)
    """Router scoring function from the HF config; MegaMoE needs sqrtsoftplus."""

    norm_topk_prob: bool | None = None
    """Whether the router renormalises its top-k probabilities (HF config norm_topk_prob); vLLM 0.31+ MegaMoE needs true."""

    hidden_size: int | None = Field(default=None, ge=1, le=INT32_MAX)
    """Model hidden size; MegaMoE needs a multiple of 128."""

    moe_intermediate_size: int | None = Field(default=None, ge=1, le=INT32_MAX)
    """Per-expert intermediate size; MegaMoE needs a multiple of 128."""

    num_routed_experts: int | None = Field(default=None, ge=1, le=INT32_MAX)
    """Number of routed experts (n_routed_experts); must be divisible by the expert-parallel size for MegaMoE."""

    vram_minimum_gb: int | None = Field(default=None, ge=0, le=INT32_MAX)
    """GPU memory one serving replica needs in total, in GB (10^9 bytes): the vLLM recipe's vram_minimum_gb (614 for V4.1-Flash). Pods go only to nodes whose GPUs hold it; 0 turns the check off. Filled from the catalog for known checkpoints."""

    num_draft_routed_experts: int | None = Field(default=None, ge=1, le=INT32_MAX)
    """Routed experts of the speculative draft layers (128 for V4.1's DSpark); must also be divisible by the expert-parallel size when speculative decoding is on."""


class ParallelismSpec(ApiModel):
    """How vLLM shards the model; each field maps to one vLLM flag."""

    tensor_parallel_size: int = Field(default=1, ge=1, le=MAX_PARALLEL_SIZE)
    """--tensor-parallel-size: GPUs each attention layer is split across."""

    pipeline_parallel_size: int = Field(default=1, ge=1, le=MAX_PARALLEL_SIZE)
    """--pipeline-parallel-size: pipeline stages."""

    data_parallel_size: int = Field(default=1, ge=1, le=MAX_PARALLEL_SIZE)
    """--data-parallel-size: data-parallel ranks in one serving replica."""

    data_parallel_size_local: int | None = Field(default=None, ge=1, le=MAX_PARALLEL_SIZE)
    """--data-parallel-size-local: DP ranks per pod. Defaults to dataParallelSize (one pod per replica); smaller values spread a replica over several pods ("remote DP")."""

    expert_parallel: bool = False
    """--enable-expert-parallel: shard the experts over TP x DP GPUs. Required by every MegaMoE backend."""

    enable_eplb: bool = False
    """--enable-eplb: expert-parallel load balancing (not supported by the FlashInfer moe_ep backends)."""

    decode_context_parallel_size: int = Field(default=1, ge=1, le=MAX_PARALLEL_SIZE)
    """--decode-context-parallel-size; must divide tensorParallelSize."""

    prefill_context_parallel_size: int = Field(default=1, ge=1, le=MAX_PARALLEL_SIZE)
    """--prefill-context-parallel-size."""

    distributed_executor_backend: Literal["mp", "ray"] = "mp"
    """--distributed-executor-backend: mp (multiprocessing) or ray."""

    @property
    def dp_local(self) -> int:
        """DP ranks per pod, with the default applied."""
        return self.data_parallel_size_local or self.data_parallel_size


class EngineSpec(ApiModel):
    """Typed common vLLM engine flags; each maps to exactly one flag."""

    max_model_len: int | None = Field(default=None, ge=1, le=INT32_MAX)
    """--max-model-len: maximum context length."""

    kv_cache_dtype: str | None = Field(default=None, max_length=64)
    """--kv-cache-dtype, e.g. fp8."""

    max_num_seqs: int | None = Field(default=None, ge=1, le=INT32_MAX)
    """--max-num-seqs: concurrent sequences per engine."""

    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=INT32_MAX)
    """--max-num-batched-tokens: tokens per scheduler step (also sizes MegaMoE's symmetric buffer)."""

    enable_prefix_caching: bool | None = None
    """--enable-prefix-caching / --no-enable-prefix-caching; unset leaves vLLM's default."""

    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    """--gpu-memory-utilization: fraction of each GPU's memory vLLM may use."""

    kv_cache_memory_bytes: int | None = Field(default=None, ge=1, le=2**53)
    """--kv-cache-memory-bytes: a fixed KV-cache budget per GPU in bytes, instead of what gpuMemoryUtilization leaves after the weights and the profiled activations."""

    block_size: int | None = Field(default=None, ge=1, le=INT32_MAX)
    """--block-size: KV-cache block size in tokens."""

    trust_remote_code: bool = False
    """--trust-remote-code."""

    tokenizer_mode: str | None = Field(default=None, max_length=64)
    """--tokenizer-mode, e.g. deepseek_v41."""

    reasoning_parser: str | None = Field(default=None, max_length=64)
    """--reasoning-parser, e.g. deepseek_v41."""

    tool_call_parser: str | None = Field(default=None, max_length=64)
    """--tool-call-parser, e.g. deepseek_v41; also turns on --enable-auto-tool-choice."""

    speculative_config: dict[str, Any] | None = None
    """--speculative-config as a JSON object, e.g. {method: dspark, num_speculative_tokens: 5}. Any value turns speculative decoding on."""

    enable_dbo: bool = False
    """--enable-dbo: dual-batch overlap (microbatching)."""

    ubatch_size: int = Field(default=0, ge=0, le=INT32_MAX)
    """--ubatch-size: microbatch count; values above 1 turn microbatching on."""

    extra_args: list[Annotated[str, Field(max_length=512)]] = Field(
        default_factory=list, max_length=64
    )
    """Arguments appended verbatim after every rendered flag: options of vllm serve (in a supported release's spellings, written in full) and the values of the options before them. They must not repeat a flag rendered from a typed field."""


class ModelCacheSpec(ApiModel):
    """Where the weights are cached inside the pod."""

    claim_name: str | None = Field(default=None, max_length=253, json_schema_extra=CLAIM_NAME_RULES)
    """PersistentVolumeClaim to mount; unset uses an emptyDir (weights are downloaded on every start)."""

    mount_path: str = Field(
        default="/root/.cache/huggingface", max_length=4096, json_schema_extra=MOUNT_PATH_RULES
    )
    """Mount path of the cache volume (HF_HOME); not /dev/shm, where the pod mounts its shared memory."""

    # Empty is allowed: like unset, it leaves the emptyDir without a limit.
    size_limit: str | None = Field(default=None, pattern=f"^$|{QUANTITY_PATTERN}", max_length=32)
    """sizeLimit of the emptyDir used when claimName is unset, e.g. 600Gi."""


class ResourcesSpec(ApiModel):
    """CPU and memory requests/limits of the vLLM container; the GPU limit is derived, never set here."""

    model_config = ConfigDict(json_schema_extra=RESOURCES_RULES)

    requests: dict[str, Amount] = Field(default_factory=dict, max_length=32)
    """Resource requests, e.g. {cpu: 32, memory: 512Gi}: cpu, memory, ephemeral-storage or an extended resource, each a non-negative quantity, at most its limit."""

    limits: dict[str, Amount] = Field(default_factory=dict, max_length=32)
    """Resource limits (an extended resource's limit must equal its request)."""


class CapacitySpec(ApiModel):
    """What one replica must hold, checked against the capacity model before pods start."""

    min_concurrent_requests: int | None = Field(default=None, ge=1, le=INT32_MAX)
    """Requests at maxModelLen one replica must hold in its KV cache. auto keeps vLLM's FusedMoE path when MegaMoE cannot hold them but it can; an explicit backend that cannot holds Placeable=False."""


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
