"""KV-cache geometry: vLLM's block arithmetic and the per-token estimate for one request.

A request at ``maxModelLen`` needs every full-attention record for all its tokens and, per
sliding-window record, ``min(W - 1 + in-flight tokens, maxModelLen)`` tokens, where in-flight
tokens are ``max_concurrent_batches x maxNumBatchedTokens``. Where the release's own KV cache
groups are known (V4-Flash; V4.1-Flash per release, GPU and attention class: proven by
conformance/capacity_check.py) this is vLLM's block arithmetic on them (``kv_blocks``, vLLM
0.33.0's own code); elsewhere a per-token estimate (``per_request_bytes``). Pure: no clock, no
environment, no Kubernetes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.catalog import kv_layout_v41
from deepseek_operator.catalog.geometry import CapacityGeometry
from deepseek_operator.catalog.kv_layout import (
    BF16_KV_DTYPES,
    MTP_SUFFIX,
    PACKED_KV_DTYPES,
    KvGroup,
    KvLayerSpec,
    KvRecord,
)


def pool_concurrency(num_blocks: int, blocks_per_request: int) -> float:
    """vLLM's maximum concurrency of a block pool (``get_max_concurrency_for_kv_cache_config``),
    0 where it refuses to start: the pool keeps one null block, so one request needs
    ``blocks_per_request + 1`` blocks (``_check_enough_kv_cache_memory``)."""
    if num_blocks <= blocks_per_request:
        return 0.0
    return num_blocks / blocks_per_request


def kv_family(kv_cache_dtype: str | None) -> str | None:
    """``packed`` or ``bf16`` for ``kvCacheDtype`` (None or auto: vLLM's packed default)."""
    dtype = (kv_cache_dtype or "auto").lower()
    if dtype in PACKED_KV_DTYPES:
        return "packed"
    if dtype in BF16_KV_DTYPES:
        return "bf16"
    return None


def kv_records(
    geometry: CapacityGeometry, kv_cache_dtype: str | None
) -> tuple[KvRecord, ...] | str:
    """The KV records for ``kvCacheDtype`` (None or auto: vLLM's packed default), or why not."""
    family = kv_family(kv_cache_dtype)
    if family is None:
        known = ", ".join(sorted(PACKED_KV_DTYPES | BF16_KV_DTYPES))
        return f"spec.engine.kvCacheDtype {kv_cache_dtype!r} has no known KV record size ({known})"
    return geometry.kv_records[family]


def kv_groups(
    geometry: CapacityGeometry,
    spec: DeepSeekServingSpec,
    release: str = "",
    cc_major: int | None = None,
) -> tuple[KvGroup, ...] | None:
    """The release's KV cache groups for ``spec``'s kvCacheDtype and speculative method on a GPU
    of compute capability ``cc_major``, or None where they are not known (the per-token estimate
    applies)."""
    layout = kv_layout(geometry, spec, release, cc_major)
    return None if isinstance(layout, str) else layout[1]


def attention_backend(extra_args: Sequence[str]) -> str | None:
    """The ``--attention-backend`` value in ``extraArgs`` (the last one wins, as in argparse),
    upper-cased as vLLM's enum names are; ``--attention-config`` (whose JSON may also name a
    backend) is returned as such, so the caller can say it is not modelled."""
    found: str | None = None
    for i, arg in enumerate(extra_args):
        name, has_value, value = arg.partition("=")
        if name.startswith("--attention-config"):
            return "--attention-config"
        if name == "--attention-backend":
            if not has_value:
                value = extra_args[i + 1] if i + 1 < len(extra_args) else ""
            found = value.strip().upper() or None
    return found


def kv_layout(
    geometry: CapacityGeometry,
    spec: DeepSeekServingSpec,
    release: str,
    cc_major: int | None,
) -> tuple[str, tuple[KvGroup, ...]] | str:
    """(what the groups are of, the groups), or why they are not known."""
    family = kv_family(spec.engine.kv_cache_dtype)
    draft = spec.engine.speculative_config
    if family is None:
        return f"kvCacheDtype {spec.engine.kv_cache_dtype!r} has no known record"
    if geometry.kv_layout == "v41-flash":
        if draft is not None:
            return "V4.1 speculative decoding's cache layers are not modelled"
        if cc_major is None:
            return "the GPU's compute capability is not known"
        p = spec.parallelism
        if max(p.prefill_context_parallel_size, p.pipeline_parallel_size) > 1 or (
            p.decode_context_parallel_size > 1
        ):
            # PP splits kv-sharing groups, PCP forces FlashMLA, DCP's sharding of V4.1's specs
            # is not in the proof: none of these is modelled.
            return "V4.1 with pipeline or context parallelism is not modelled"
        backend = attention_backend(spec.engine.extra_args)
        if backend is not None and backend.startswith("--"):
            return f"{backend} in extraArgs is not modelled (only --attention-backend is)"
        att = kv_layout_v41.attention(
            release,
            cc_major,
            p.tensor_parallel_size,
            family == "packed",
            spec.engine.kv_cache_dtype or "auto",
            backend,
        )
        if isinstance(att, str):
            return att
        return f"{att.name}, {att.kv_dtype}", kv_layout_v41.groups(att)
    if geometry.kv_groups is None:
        return "no KV cache groups known"
    if draft is None:
        found = geometry.kv_groups.get(family)
    elif draft.get("method") == "mtp":
        found = geometry.kv_groups.get(family + MTP_SUFFIX)
    else:
        return f"speculative method {draft.get('method')!r} is not modelled"
    if found is None:
        return "no KV cache groups known for this kvCacheDtype"
    return "vLLM's KV cache groups", found


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def layer_blocks_per_request(
    spec: KvLayerSpec, max_model_len: int, in_flight_tokens: int, dcp: int
) -> int:
    """Blocks one request at ``max_model_len`` takes of one layer spec (vLLM 0.33.0
    ``max_memory_usage_bytes`` / ``page_size_bytes`` of v1/kv_cache_interface.py)."""
    if spec.kind == "circular":
        return 1  # the ring occupies one block for the request's lifetime
    if spec.kind == "sliding":
        assert spec.window is not None
        tokens = min(spec.window - 1 + in_flight_tokens, max_model_len)
        # +1: the window need not start at a block boundary.
        return _cdiv(tokens, spec.block_size) + 1
    return _cdiv(_cdiv(max_model_len, dcp), spec.block_size)


def kv_blocks(
    groups: Sequence[KvGroup],
    kv_bytes: int,
    max_model_len: int,
    in_flight_tokens: int,
    pipeline_stages: int,
    dcp: int,
) -> tuple[int, int, int]:
    """vLLM's block pool for ``kv_bytes`` per GPU: (bytes per block, blocks per request at
    ``max_model_len``, number of blocks), as v1/core/kv_cache_planning.py and
    ``get_max_concurrency_for_kv_cache_config`` compute them.

    A block costs the largest group's page over all its layers (every group draws from one pool);
    a group's request takes the most blocks any of its layers needs; the groups add up.
    INFERRED for pipeline stages > 1 (not proven by conformance): each stage holds 1/PP of
    every group's layers.
    """
    bytes_per_block, per_request = _block_shape(
        tuple(groups), max_model_len, in_flight_tokens, pipeline_stages, dcp
    )
    return bytes_per_block, per_request, max(kv_bytes, 0) // bytes_per_block


# Every capacity figure of a spec (each GPU type, both MoE paths, each layout the advice weighs)
# asks for the same shape: a pure function of its arguments (bounded, maxModelLen is the user's).
@functools.lru_cache(maxsize=256)
def _block_shape(
    groups: tuple[KvGroup, ...],
    max_model_len: int,
    in_flight_tokens: int,
    pipeline_stages: int,
    dcp: int,
) -> tuple[int, int]:
    """(bytes per block, blocks per request at ``max_model_len``) of :func:`kv_blocks`."""
    # Block-outermost packing (every DeepSeek V4 / V4.1 layout): the stride is rounded up to the
    # lcm of every layer's block stride alignment (vLLM 0.33.0 _get_kv_cache_bytes_per_block).
    alignment = math.lcm(*(spec.stride_alignment for g in groups for spec, _ in g.layers))
    widest = _cdiv(max(g.page_bytes for g in groups), pipeline_stages)
    bytes_per_block = _cdiv(widest, alignment) * alignment
    per_request = sum(
        max(
            layer_blocks_per_request(spec, max_model_len, in_flight_tokens, dcp)
            for spec, _ in g.layers
        )
        for g in groups
    )
    return bytes_per_block, per_request


def async_scheduling(extra_args: Sequence[str]) -> bool:
    """Whether vLLM schedules asynchronously: on unless ``--no-async-scheduling`` in
    ``extraArgs`` has the last word (argparse's ``BooleanOptionalAction``)."""
    on = True
    for arg in extra_args:
        name = arg.partition("=")[0]
        if name == "--no-async-scheduling":
            on = False
        elif name == "--async-scheduling":
            on = True
    return on


def max_concurrent_batches(spec: DeepSeekServingSpec) -> int:
    """vLLM 0.33.0's ``max_concurrent_batches`` (config/vllm.py, V1 model runner): 2 with async
    scheduling at PP 1, else the PP size (1 without async scheduling: a prefill pool that runs
    ``--no-async-scheduling`` halves every sliding-window reservation)."""
    pp = spec.parallelism.pipeline_parallel_size
    return 2 if pp == 1 and async_scheduling(spec.engine.extra_args) else pp


def per_request_bytes(
    records: Sequence[KvRecord],
    max_model_len: int,
    in_flight_tokens: int,
    pipeline_stages: int,
    dcp: int,
) -> int:
    """KV bytes one request at ``max_model_len`` takes on one GPU of its DP rank."""
    total = 0
    for record in records:
        if record.circular_rows is not None:
            tokens = record.circular_rows
        elif record.window is not None:
            tokens = min(record.window - 1 + in_flight_tokens, max_model_len)
        else:
            # Full-attention records shard their token positions over decode context parallel.
            tokens = math.ceil(max_model_len / dcp)
        states = math.ceil(tokens / record.tokens_per_state)
        total += states * record.bytes_per_state * record.layers
    return math.ceil(total / pipeline_stages)
