"""The sections of the ``DeepSeekServing`` spec: model, parallelism, engine, cache, resources.

They are shared by the aggregated spec (:mod:`.spec`) and by each role of a disaggregated one
(:mod:`.roles`), which is why they live apart from the root: a role reuses the parallel layout and
resources types as they are, so the CRD describes both with the same schema.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
)

from deepseek_operator.api.base import ApiModel
from deepseek_operator.api.core_v1 import (
    CLAIM_NAME_RULES,
    MODEL_CACHE_RULES,
    MOUNT_PATH_RULES,
    QUANTITY_PATTERN,
    RESOURCES_RULES,
    SECRET_NAME_RULES,
    Amount,
)
from deepseek_operator.api.limits import INT32_MAX, MAX_PARALLEL_SIZE


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


class SecretKeyRef(ApiModel):
    """One key of a Secret in the serving's namespace."""

    name: str = Field(min_length=1, max_length=253, json_schema_extra=SECRET_NAME_RULES)
    """Name of the Secret."""

    key: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")
    """Key in the Secret whose value is used."""


class ModelCacheFillSpec(ApiModel):
    """The operator fills the cache volume itself: one fill Job per claim, model and revision."""

    token_secret_ref: SecretKeyRef | None = None
    """Secret key holding the Hugging Face token, passed to the fill Job only (an env var from a secretKeyRef); unset: no token (public repositories)."""

    endpoint: str | None = Field(default=None, max_length=1024, pattern=r"^https?://[^\s]+$")
    """HF_ENDPOINT of the fill Job: a hub mirror (https://...); unset: huggingface.co."""


class ModelCacheSpec(ApiModel):
    """Where the weights are cached inside the pod."""

    model_config = ConfigDict(json_schema_extra=MODEL_CACHE_RULES)

    claim_name: str | None = Field(default=None, max_length=253, json_schema_extra=CLAIM_NAME_RULES)
    """PersistentVolumeClaim to mount; unset uses an emptyDir (weights are downloaded on every start)."""

    mount_path: str = Field(
        default="/root/.cache/huggingface", max_length=4096, json_schema_extra=MOUNT_PATH_RULES
    )
    """Mount path of the cache volume (HF_HOME); not /dev/shm, where the pod mounts its shared memory."""

    # Empty is allowed: like unset, it leaves the emptyDir without a limit.
    size_limit: str | None = Field(default=None, pattern=f"^$|{QUANTITY_PATTERN}", max_length=32)
    """sizeLimit of the emptyDir used when claimName is unset, e.g. 600Gi."""

    fill: ModelCacheFillSpec | None = None
    """The operator fills the claim (a ReadWriteMany PVC you provide) with spec.model at spec.model.revision before any vLLM pod starts: one Job per claim, model and revision, shared by every serving that asks for the same; WeightsReady says how far it is. The vLLM pods then mount the claim read-only with HF_HUB_OFFLINE=1. Needs claimName."""


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
