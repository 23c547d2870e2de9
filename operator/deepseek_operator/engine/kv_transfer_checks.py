"""vLLM's refusals that involve KV transfer, checked for each role of a disaggregated serving.

A role's decision is today's decision on the role's projected spec (its layout and backend);
these checks add what vLLM refuses only because ``--kv-transfer-config`` is set, read from the
release's own code (docs/disaggregation.md, "The decision, per role"):

* ``KVTransferContextParallel``: NixlConnector with prefill context parallel accepts only the
  ``kv_producer`` role, and DCP > 1 beside it only at TP1 with DCP = PCP (``nixl/connector.py``);
  DeepSeek V4.1's PCP guard refusing KV transfer altogether is the release's ``ContextParallel``
  check (:func:`~.release.prefill_context_parallel`).
* ``KVTransferDecodeContextParallel``: decode context parallel must be 1 or the NIXL transfer
  parallel size, max(TP, PCP) (``config/vllm.py``).
* ``KVTransferAllocator``: ``expandable_segments:True`` in ``PYTORCH_CUDA_ALLOC_CONF`` is refused
  with a KV connector unless the cumem allocator is on (``_verify_kv_transfer_compat``).
* ``KVTransferSpecializedDecode``: DeepSeek V4.1's specialized decode
  (``--additional-config`` with ``decode_backend: latency_specialized``) refuses KV transfer in
  the releases that have it (``specialized_decode.unsupported``); older releases ignore the key.

Every check returns None for an aggregated serving (no ``kv_role``), so its decision is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deepseek_operator.api.extra_args.config_flags import final_config, normalised
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.catalog.models import V41_ARCH
from deepseek_operator.catalog.vllm.rules import ReleaseRules
from deepseek_operator.engine.checks import CheckCategory, CheckResult, check
from deepseek_operator.engine.model_facts import ModelFacts

SPEC = CheckCategory.SPEC
PRODUCER = "kv_producer"
_ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
ADDITIONAL_CONFIG_FLAG = "--additional-config"
SPECIALIZED_DECODE = "latency_specialized"


def context_parallel(spec: DeepSeekServingSpec, kv_role: str | None) -> CheckResult | None:
    """NixlConnector with PCP > 1: ``kv_producer`` only, and DCP > 1 only at TP1 with DCP = PCP."""
    p = spec.parallelism
    pcp, dcp, tp = (
        p.prefill_context_parallel_size,
        p.decode_context_parallel_size,
        p.tensor_parallel_size,
    )
    if kv_role is None or pcp <= 1:
        return None
    message = f"prefillContextParallelSize {pcp} in a {kv_role} role"
    if kv_role != PRODUCER:
        return check(
            "KVTransferContextParallel",
            SPEC,
            "",
            passed=False,
            message=message + ". vLLM: NixlConnector PCP currently supports kv_producer only. "
            "Consumers and kv_both require prefill_context_parallel_size=1.",
        )
    if dcp > 1 and (tp != 1 or dcp != pcp):
        return check(
            "KVTransferContextParallel",
            SPEC,
            "",
            passed=False,
            message=message + f" with decodeContextParallelSize {dcp} and tensorParallelSize "
            f"{tp}. vLLM: NixlConnector PCP+DCP requires TP1 with DCP spanning the full PCP "
            "group.",
        )
    return check("KVTransferContextParallel", SPEC, "", passed=True, message=message)


def decode_context_parallel(spec: DeepSeekServingSpec, kv_role: str | None) -> CheckResult | None:
    """DCP is 1 or the NIXL transfer parallel size, max(TP, PCP) (``VllmConfig``'s assert)."""
    p = spec.parallelism
    dcp = p.decode_context_parallel_size
    transfer = max(p.tensor_parallel_size, p.prefill_context_parallel_size)
    if kv_role is None or dcp <= 1:
        return None
    message = f"decodeContextParallelSize {dcp} with a NIXL transfer parallel size of {transfer}"
    return check(
        "KVTransferDecodeContextParallel",
        SPEC,
        "",
        passed=dcp == transfer,
        message=message
        + (
            ""
            if dcp == transfer
            else f". vLLM: decode_context_parallel_size={dcp} must be 1 or equal to the NIXL "
            f"transfer parallel size={transfer}."
        ),
    )


def _cumem_on(args: list[str]) -> bool:
    """The last cumem-allocator flag of ``args`` turns it on (vLLM's default is off); sleep mode
    turns it on too."""
    state = False
    for arg in args:
        flag = normalised(arg).partition("=")[0]
        if flag in ("--enable-cumem-allocator", "--enable-sleep-mode"):
            state = True
        elif flag in ("--no-enable-cumem-allocator", "--disable-cumem-allocator"):
            state = False
    return state


def allocator(spec: DeepSeekServingSpec, kv_role: str | None) -> CheckResult | None:
    """``expandable_segments:True`` needs the cumem allocator when a KV connector is set."""
    conf = spec.env_value(_ALLOC_CONF)
    # vLLM looks for this exact text (case included) in the variable.
    if kv_role is None or conf is None or "expandable_segments:True" not in conf:
        return None
    cumem = _cumem_on(list(spec.engine.extra_args))
    message = f"{_ALLOC_CONF}={conf} with KV transfer"
    return check(
        "KVTransferAllocator",
        SPEC,
        "",
        passed=cumem,
        message=message
        + (
            " and --enable-cumem-allocator"
            if cumem
            else ". vLLM refuses expandable_segments with a KV connector unless the cumem "
            "allocator is on: add --enable-cumem-allocator to spec.engine.extraArgs or drop "
            "expandable_segments"
        ),
    )


def decode_backend(extra_args: Sequence[str]) -> Any:
    """The ``decode_backend`` of the ``--additional-config`` vLLM runs with (None: not set)."""
    config = final_config(extra_args, lambda name: name == ADDITIONAL_CONFIG_FLAG)
    return config.get("decode_backend") if isinstance(config, dict) else None


def specialized_decode(
    rules: ReleaseRules, facts: ModelFacts, spec: DeepSeekServingSpec, kv_role: str | None
) -> CheckResult | None:
    """V4.1's ``latency_specialized`` decode refuses KV transfer (releases that have it)."""
    if kv_role is None or facts.architecture != V41_ARCH:
        return None
    if decode_backend(spec.engine.extra_args) != SPECIALIZED_DECODE:
        return None
    message = f"{ADDITIONAL_CONFIG_FLAG} decode_backend={SPECIALIZED_DECODE} in a {kv_role} role"
    if not rules.v41_specialized_decode:
        return check(
            "KVTransferSpecializedDecode",
            SPEC,
            "",
            passed=True,
            message=message + f": vLLM {rules.release} has no specialized decode and ignores it",
        )
    return check(
        "KVTransferSpecializedDecode",
        SPEC,
        "",
        passed=False,
        message=message + f". vLLM {rules.release}: decode_backend=latency_specialized needs no "
        "LoRA, KV transfer or batch invariance; drop it from this role's extraArgs (the "
        "specialized decode serves aggregated TP4 pools on GB300 only)",
    )
