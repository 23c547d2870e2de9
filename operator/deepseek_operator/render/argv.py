"""The ``vllm serve`` argument list: long flag names, fixed order, ``--moe-backend`` explicit.

Order: model, identity, network, parallelism, multi-node DP (when a replica spans pods),
``--moe-backend``, the typed engine flags in field order, a disaggregated role's
``--kv-transfer-config``, then ``extraArgs`` verbatim and last.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.engine.resolution import Resolution
from deepseek_operator.names import DP_RPC_PORT, LWS_LEADER_ADDRESS_ENV, LWS_WORKER_INDEX_ENV


@dataclass(frozen=True)
class PodRole:
    """Where a pod sits in a multi-pod replica: the LeaderWorkerSet leader or a worker."""

    leader: bool = True

    @property
    def is_head(self) -> bool:
        """True for the pod that serves HTTP (the DP head)."""
        return self.leader


LEADER_ADDRESS = f"$({LWS_LEADER_ADDRESS_ENV})"
WORKER_INDEX = f"$({LWS_WORKER_INDEX_ENV})"
"""Kubernetes expands ``$(VAR)`` in args from the container's environment, which LWS fills."""


def vllm_args(
    spec: DeepSeekServingSpec,
    res: Resolution,
    role: PodRole | None = None,
    kv_transfer_config: str | None = None,
) -> list[str]:
    """Arguments after ``vllm serve`` for one pod of ``spec`` under decision ``res``.

    ``kv_transfer_config``: a disaggregated role's ``--kv-transfer-config`` value (before the
    extraArgs, which may not set it).
    """
    p, e, m = spec.parallelism, spec.engine, spec.model
    args: list[str] = [m.name]
    if m.revision:
        args += ["--revision", m.revision]
    if m.served_model_name:
        args += ["--served-model-name", m.served_model_name]
    args += ["--host", "0.0.0.0", "--port", str(spec.port)]
    args += ["--tensor-parallel-size", str(p.tensor_parallel_size)]
    args += ["--pipeline-parallel-size", str(p.pipeline_parallel_size)]
    args += ["--data-parallel-size", str(p.data_parallel_size)]
    if res.pods_per_replica > 1:
        role = role or PodRole()
        args += ["--data-parallel-size-local", str(p.dp_local)]
        # One pod per LWS index; vLLM derives the first DP rank of a pod from its node rank
        # (node rank x DP local), which is LWS's worker index (0 on the leader).
        args += ["--nnodes", str(res.pods_per_replica)]
        args += ["--node-rank", "0" if role.is_head else WORKER_INDEX]
        if not role.is_head:
            args.append("--headless")
        args += ["--data-parallel-address", LEADER_ADDRESS]
        args += ["--data-parallel-rpc-port", str(DP_RPC_PORT)]
    if p.expert_parallel:
        args.append("--enable-expert-parallel")
    if p.enable_eplb:
        args.append("--enable-eplb")
    if p.decode_context_parallel_size > 1:
        args += ["--decode-context-parallel-size", str(p.decode_context_parallel_size)]
    if p.prefill_context_parallel_size > 1:
        args += ["--prefill-context-parallel-size", str(p.prefill_context_parallel_size)]
    args += ["--distributed-executor-backend", p.distributed_executor_backend]
    args += ["--moe-backend", res.moe_backend]
    if e.max_model_len is not None:
        args += ["--max-model-len", str(e.max_model_len)]
    if e.kv_cache_dtype is not None:
        args += ["--kv-cache-dtype", e.kv_cache_dtype]
    if e.max_num_seqs is not None:
        args += ["--max-num-seqs", str(e.max_num_seqs)]
    if e.max_num_batched_tokens is not None:
        args += ["--max-num-batched-tokens", str(e.max_num_batched_tokens)]
    if e.enable_prefix_caching is not None:
        args.append(
            "--enable-prefix-caching" if e.enable_prefix_caching else "--no-enable-prefix-caching"
        )
    if e.gpu_memory_utilization is not None:
        args += ["--gpu-memory-utilization", str(e.gpu_memory_utilization)]
    if e.kv_cache_memory_bytes is not None:
        args += ["--kv-cache-memory-bytes", str(e.kv_cache_memory_bytes)]
    if e.block_size is not None:
        args += ["--block-size", str(e.block_size)]
    if e.trust_remote_code:
        args.append("--trust-remote-code")
    if e.tokenizer_mode is not None:
        args += ["--tokenizer-mode", e.tokenizer_mode]
    if e.reasoning_parser is not None:
        args += ["--reasoning-parser", e.reasoning_parser]
    if e.tool_call_parser is not None:
        args += ["--tool-call-parser", e.tool_call_parser, "--enable-auto-tool-choice"]
    if e.speculative_config is not None:
        args += ["--speculative-config", json.dumps(e.speculative_config, separators=(",", ":"))]
    if e.enable_dbo:
        args.append("--enable-dbo")
    if e.ubatch_size:
        args += ["--ubatch-size", str(e.ubatch_size)]
    if kv_transfer_config is not None:
        args += ["--kv-transfer-config", kv_transfer_config]
    args += list(e.extra_args)
    return args
