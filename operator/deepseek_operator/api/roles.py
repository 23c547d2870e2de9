"""Prefill/decode disaggregation: ``spec.disaggregation`` and its roles.

A disaggregated DeepSeekServing runs two pools of vLLM servers, a prefill pool (``kv_producer``)
that computes the KV cache of a prompt and a decode pool (``kv_consumer``) that pulls it over the
KV connector and generates. A role sets only what may differ between the pools: replicas, the
parallel layout, ``moeBackend``, the batch-shape engine flags, resources and extraArgs. Everything
vLLM's NIXL compatibility hash covers (model, revision, image / vLLM release, dtype,
``kvCacheDtype``, speculative decoding, the hybrid KV-cache manager, attention backend, transfer
mode) stays in the shared spec, so the two pools hash the same by construction; the rules of
:mod:`.rules.disaggregation` refuse role extraArgs that would change a hashed factor.

The roles are a list keyed by ``role`` so that another role kind (an encoder pool, say) is one
more enum value, not a schema change.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from deepseek_operator.api.backends import normalize_backend
from deepseek_operator.api.base import ApiModel
from deepseek_operator.api.limits import INT32_MAX, MAX_REPLICAS
from deepseek_operator.api.sections import ParallelismSpec, ResourcesSpec

NIXL_CONNECTOR = "NixlConnector"
"""The one KV connector modelled: its compatibility hash, side channel and roles are known."""

RoleKind = Literal["prefill", "decode"]
ROLE_KINDS: tuple[RoleKind, ...] = ("prefill", "decode")
"""Role kinds in render order: the prefill pool first (decode pods wait on nothing from it)."""

MAX_ROLE_EXTRA_ARGS = 32
"""Most items a role's extraArgs holds."""

KV_ROLES: dict[str, str] = {"prefill": "kv_producer", "decode": "kv_consumer"}
"""The ``kv_role`` each role renders (NixlConnector deprecates ``kv_both``)."""


class RoleEngineSpec(ApiModel):
    """The vLLM engine flags that may differ between the prefill and the decode pool."""

    max_num_seqs: int | None = Field(default=None, ge=1, le=INT32_MAX)
    """--max-num-seqs: concurrent sequences per engine (decode pools run hundreds, prefill pools a few)."""

    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=INT32_MAX)
    """--max-num-batched-tokens: tokens per scheduler step (prefill 16K-32K, decode 0.5K-2K); also sizes MegaMoE's symmetric buffer."""

    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    """--gpu-memory-utilization of this role's GPUs."""

    enforce_eager: bool = False
    """--enforce-eager: no CUDA graphs (prefill pools, whose batches are large, often run eager)."""

    enable_dbo: bool = False
    """--enable-dbo: dual-batch overlap (microbatching)."""

    ubatch_size: int = Field(default=0, ge=0, le=INT32_MAX)
    """--ubatch-size: microbatch count; values above 1 turn microbatching on."""

    # At most 32 items (the shared list takes 64): the API server bounds the estimated cost of
    # a rule by the items it may run on, and two roles of 64 would exceed it.
    extra_args: list[Annotated[str, Field(max_length=512)]] = Field(
        default_factory=list, max_length=MAX_ROLE_EXTRA_ARGS
    )
    """Arguments appended after the shared spec.engine.extraArgs for this role only (e.g. --compilation-config with a CUDA-graph mode). Same rules as spec.engine.extraArgs, and none may change what the NIXL compatibility hash covers (--dtype, --attention-backend, --attention-config, the hybrid KV-cache manager, --hf-overrides, --kv-transfer-config)."""


class RoleSpec(ApiModel):
    """One pool of a disaggregated serving: its kind and what may differ from the other pool."""

    role: RoleKind
    """prefill (kv_producer: computes the prompt's KV cache) or decode (kv_consumer: pulls it and generates)."""

    replicas: int = Field(default=1, ge=0, le=MAX_REPLICAS)
    """Independent serving replicas of this role, each one expert-parallel group."""

    moe_backend_as_written: str = Field(
        default="auto", alias="moeBackend", min_length=1, max_length=64
    )
    """vLLM MoE backend of this role (--moe-backend), decided like spec.moeBackend. It is not in the NIXL hash, so prefill and decode may differ."""

    parallelism: ParallelismSpec = Field(
        default_factory=ParallelismSpec, json_schema_extra={"default": {}}
    )
    """Parallel layout of this role (TP, PP, DP, EP, context parallel)."""

    engine: RoleEngineSpec = Field(
        default_factory=RoleEngineSpec, json_schema_extra={"default": {}}
    )
    """Engine flags of this role."""

    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    """CPU/memory requests and limits of this role's vLLM containers."""

    @property
    def moe_backend(self) -> str:
        """The role's moeBackend normalised as vLLM does (case, '-' for '_')."""
        return normalize_backend(self.moe_backend_as_written)


class EndpointPickerSpec(ApiModel):
    """The endpoint picker (e.g. llm-d's inference scheduler) a Gateway API Inference Extension
    gateway asks which pod serves a request."""

    name: str = Field(min_length=1, max_length=63, pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    """Name of the endpoint picker's Service, in the serving's namespace."""

    port: int = Field(ge=1, le=65535)
    """Port of that Service (its gRPC ext-proc port, 9002 for llm-d's)."""


class DisaggregationSpec(ApiModel):
    """Prefill/decode disaggregation: two pools joined by a KV connector."""

    kv_connector: str = Field(default=NIXL_CONNECTOR, min_length=1, max_length=64)
    """vLLM KV connector (kv_transfer_config.kv_connector). Only NixlConnector is modelled."""

    roles: list[RoleSpec] = Field(
        min_length=2,
        max_length=2,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["role"]},
    )
    """The pools, one per role kind: exactly one prefill and one decode role."""

    endpoint_picker: EndpointPickerSpec | None = None
    """With it, the operator writes an InferencePool (inference.networking.k8s.io/v1, when the cluster serves it) over both roles' HTTP-serving pods that points at this endpoint picker; the pods carry llm-d.ai/role, which llm-d's prefill/decode filters read."""

    def role(self, kind: str) -> RoleSpec:
        """The role of ``kind`` (the rules guarantee one of each)."""
        return next(r for r in self.roles if r.role == kind)
