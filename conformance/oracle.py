"""vLLM's own answer about rendered `vllm serve` command lines, for one release, in one process.

Run with a release's virtualenv python from the repository root; reads a JSON array of cases on
stdin, writes a JSON array of answers (same order) on stdout:

    ~/.cache/deepseek-operator/vllm/0.33.0/bin/python -m conformance.oracle < cases.json

A case: `{"id": str, "argv": ["serve", MODEL, ...], "model": {...}, "capabilities": [[10, 0], ...]}`
where `model` holds the checkpoint's config values (`architecture`, `hidden_size`,
`moe_intermediate_size`, `n_routed_experts`, `num_experts_per_tok`, `scoring_func`,
`norm_topk_prob`, `expert_dtype`, `n_shared_experts`).

An answer: `accepted` (vLLM's serve parser, `vllm serve`'s validation and
`AsyncEngineArgs.from_cli_args` all took the argv), `error` (what refused it), `parsed` (the values
vLLM read: backend, sizes, EP, DP-local, headless...), and per capability `refusals` (every guard of
vLLM's that refuses the configuration on that GPU: `probe`, `error` type, `message`) and
`sequence_parallel` (the model's own `_use_sequence_parallel`). For an argv with `--nnodes` > 1,
`launch`: what this pod of a multi-node replica becomes (below), or the `refusal` that stops it.

How a multi-node launch is checked: `EngineArgs.create_engine_config` runs as `vllm serve` runs it
(with `headless` for a `--headless` pod), on a stand-in model config (no checkpoint is fetched),
through its data-parallel launch options (`--nnodes`, `--node-rank`, DP-local inference, the DP
rank of the pod) into vLLM's own `ParallelConfig`, whose construction is the tripwire. The answer
holds that ParallelConfig's `data_parallel_rank`, `data_parallel_size_local`, `world_size`,
`nnodes_within_dp`, `node_rank_within_dp` (> 0: `run_headless` starts a multi-node TP/PP worker
instead of DP engines) and `local_world_size`.

How the guards are reached without a GPU: the model and MoE-layer constructors of the release's
CUDA DeepSeek V4 / V4.1 modules run on fake distributed groups and a mock `VllmConfig` (built from
the parsed `AsyncEngineArgs`) up to the first call that would build weights, which is replaced by a
tripwire; an exception raised by the constructor's own code (its `raise` or `assert`) is a refusal.
The FlashInfer moe_ep checks, the MegaMoE capability/shape check and the kernel-config validators
are called directly. The platform reports the case's compute capability (fake_platform).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import traceback
import types
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any
from unittest import mock

from conformance import fake_platform, vllm_cli

V4_ARCH = "DeepseekV4ForCausalLM"
V41_ARCH = "DeepseekV41ForCausalLM"
# The CUDA model modules vLLM loads for each architecture (its registry names the package; the
# package picks `nvidia` on CUDA).
MODEL_MODULES = {
    V4_ARCH: "vllm.models.deepseek_v4.nvidia.model",
    V41_ARCH: "vllm.models.deepseek_v41.nvidia.model",
}


class Tripwire(Exception):
    """Raised where construction would start building weights: every guard before it passed."""


class WeightsTripwire:
    """Stands in for a layer or expert class the constructor builds after its guards: a class
    (some releases subclass the expert class at import), whose construction trips."""

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        raise Tripwire("weights")


def _optional_import(name: str) -> types.ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


# Imported once, on the CPU platform, before any fake is active.
kernel = importlib.import_module("vllm.config.kernel")
model_modules = {arch: importlib.import_module(name) for arch, name in MODEL_MODULES.items()}
mega_moe_module = _optional_import("vllm.model_executor.layers.fused_moe.deep_gemm_mega_moe")
fi_moe_ep = _optional_import("vllm.model_executor.layers.fused_moe.flashinfer_moe_ep")
fi_moe_ep_experts = _optional_import(
    "vllm.model_executor.layers.fused_moe.experts.flashinfer_moe_ep"
)
fused_moe_config = importlib.import_module("vllm.model_executor.layers.fused_moe.config")
parallel_module = importlib.import_module("vllm.config.parallel")

MEGA_MOE_BACKENDS = frozenset(getattr(kernel, "MEGA_MOE_BACKENDS", frozenset()))
FLASHINFER_MOE_EP_BACKENDS = frozenset(getattr(kernel, "FLASHINFER_MOE_EP_BACKENDS", frozenset()))


# ----------------------------------------------------------------------------------------------
# Parsing
# ----------------------------------------------------------------------------------------------


def effective_moe_backend(engine_args: Any) -> str:
    """The backend the engine runs: `--moe-backend` unless auto, else the kernel config's.

    Mirrors `EngineArgs.create_engine_config` ("if self.moe_backend != 'auto':
    kernel_config.moe_backend = self.moe_backend").
    """
    explicit = getattr(engine_args, "moe_backend", "auto")
    if explicit != "auto":
        return str(explicit)
    return str(engine_args.kernel_config.moe_backend)


def parsed_values(args: Any, engine_args: Any) -> dict[str, Any]:
    """The values vLLM read from the argv that the operator's spec decides."""
    ea = engine_args
    return {
        "model": ea.model,
        "moe_backend": effective_moe_backend(ea),
        "tensor_parallel_size": ea.tensor_parallel_size,
        "pipeline_parallel_size": ea.pipeline_parallel_size,
        "data_parallel_size": ea.data_parallel_size,
        "data_parallel_size_local": ea.data_parallel_size_local,
        "data_parallel_start_rank": getattr(ea, "data_parallel_start_rank", None),
        "nnodes": getattr(ea, "nnodes", None),
        "node_rank": getattr(ea, "node_rank", None),
        "data_parallel_address": ea.data_parallel_address,
        "data_parallel_rpc_port": ea.data_parallel_rpc_port,
        "prefill_context_parallel_size": getattr(ea, "prefill_context_parallel_size", 1),
        "decode_context_parallel_size": getattr(ea, "decode_context_parallel_size", 1),
        "enable_expert_parallel": bool(ea.enable_expert_parallel),
        "enable_eplb": bool(ea.enable_eplb),
        "num_redundant_experts": ea.eplb_config.num_redundant_experts,
        "distributed_executor_backend": ea.distributed_executor_backend,
        "headless": bool(getattr(args, "headless", False)),
        "enable_dbo": bool(getattr(ea, "enable_dbo", False)),
        "ubatch_size": getattr(ea, "ubatch_size", 0),
        "speculative_config": ea.speculative_config,
        "enable_lora": bool(getattr(ea, "enable_lora", False)),
        "max_model_len": ea.max_model_len,
        "max_num_seqs": ea.max_num_seqs,
        "max_num_batched_tokens": ea.max_num_batched_tokens,
        "kv_cache_dtype": ea.kv_cache_dtype,
        "enable_prefix_caching": ea.enable_prefix_caching,
        "gpu_memory_utilization": ea.gpu_memory_utilization,
        "block_size": ea.block_size,
        "trust_remote_code": bool(ea.trust_remote_code),
    }


# ----------------------------------------------------------------------------------------------
# Mock configs and fake distributed groups
# ----------------------------------------------------------------------------------------------


def hf_config(model: dict[str, Any]) -> SimpleNamespace:
    """The checkpoint config a DeepSeek V4 / V4.1 model constructor reads (small vocab: no weights
    are built before the tripwire anyway)."""
    values = {
        "architectures": [model["architecture"]],
        "hidden_size": model["hidden_size"],
        "moe_intermediate_size": model["moe_intermediate_size"],
        "n_routed_experts": model["n_routed_experts"],
        "num_experts_per_tok": model.get("num_experts_per_tok", 6),
        "scoring_func": model.get("scoring_func", "sqrtsoftplus"),
        "norm_topk_prob": model.get("norm_topk_prob", True),
        "expert_dtype": model.get("expert_dtype", "fp4"),
        "n_shared_experts": model.get("n_shared_experts", 1),
        "routed_scaling_factor": model.get("routed_scaling_factor", 1.5),
        "swiglu_limit": model.get("swiglu_limit", 10.0),
        "hidden_act": "silu",
        "topk_method": "noaux_tc",
        "num_hash_layers": 0,
        "num_hidden_layers": model.get("num_hidden_layers", 43),
        "vocab_size": 1024,
        "vision_n_layers": 0,
    }
    return SimpleNamespace(**values)


class _ConfigTripwire:
    """An hf_config whose first read trips: the model constructor's guards never read it."""

    def __getattr__(self, name: str) -> Any:
        raise Tripwire(f"hf_config.{name}")


def parallel_config(engine_args: Any) -> SimpleNamespace:
    """A ParallelConfig stand-in with the parsed values (and vLLM's own `use_ubatching`)."""
    ea = engine_args
    config = SimpleNamespace(
        tensor_parallel_size=ea.tensor_parallel_size,
        pipeline_parallel_size=ea.pipeline_parallel_size,
        data_parallel_size=ea.data_parallel_size,
        data_parallel_size_local=ea.data_parallel_size_local or ea.data_parallel_size,
        prefill_context_parallel_size=getattr(ea, "prefill_context_parallel_size", 1),
        decode_context_parallel_size=getattr(ea, "decode_context_parallel_size", 1),
        enable_expert_parallel=bool(ea.enable_expert_parallel),
        enable_eplb=bool(ea.enable_eplb),
        eplb_config=ea.eplb_config,
        all2all_backend=ea.all2all_backend,
        enable_dbo=bool(getattr(ea, "enable_dbo", False)),
        ubatch_size=getattr(ea, "ubatch_size", 0),
        distributed_executor_backend=ea.distributed_executor_backend,
        expert_placement_strategy=getattr(ea, "expert_placement_strategy", "linear"),
    )
    use_ubatching = getattr(parallel_module.ParallelConfig, "use_ubatching", None)
    config.use_ubatching = (
        use_ubatching.fget(config) if isinstance(use_ubatching, property) else False
    )
    return config


def cache_config(engine_args: Any) -> SimpleNamespace:
    """The CacheConfig values the V4.1 PCP guard reads (vLLM's defaults where unset)."""
    from vllm.config import CacheConfig

    fields = CacheConfig.__dataclass_fields__
    prefix = engine_args.enable_prefix_caching
    if prefix is None:
        prefix = (
            fields["enable_prefix_caching"].default if "enable_prefix_caching" in fields else True
        )
    bounded = getattr(engine_args, "swa_bounded_replay", None)
    if bounded is None and "swa_bounded_replay" in fields:
        bounded = fields["swa_bounded_replay"].default
    return SimpleNamespace(enable_prefix_caching=prefix, swa_bounded_replay=bool(bounded))


def vllm_config(engine_args: Any, model: dict[str, Any], hf: Any) -> SimpleNamespace:
    """The mock VllmConfig the constructors and guards read."""
    ea = engine_args
    lora = SimpleNamespace(max_loras=ea.max_loras) if getattr(ea, "enable_lora", False) else None
    return SimpleNamespace(
        model_config=SimpleNamespace(hf_config=hf, architectures=[model["architecture"]]),
        parallel_config=parallel_config(ea),
        kernel_config=SimpleNamespace(moe_backend=effective_moe_backend(ea)),
        speculative_config=ea.speculative_config,
        kv_transfer_config=ea.kv_transfer_config,
        cache_config=cache_config(ea),
        lora_config=lora,
        quant_config=None,
        weight_transfer_config=None,
        scheduler_config=SimpleNamespace(max_num_batched_tokens=ea.max_num_batched_tokens),
        attention_config=SimpleNamespace(backend=None),
        compilation_config=SimpleNamespace(),
    )


def _group(world_size: int) -> SimpleNamespace:
    return SimpleNamespace(world_size=world_size, rank_in_group=0, rank=0, device_group=None)


parallel_state = importlib.import_module("vllm.distributed.parallel_state")


@contextlib.contextmanager
def fake_groups(config: SimpleNamespace) -> Iterator[int]:
    """vLLM's process groups as single-rank stand-ins of the configured sizes; yields the MoE EP
    size, asked of vLLM's own `FusedMoEParallelConfig.make` (EP spans DP x PCP x TP)."""
    pc = config.parallel_config
    sizes = {
        "_TP": pc.tensor_parallel_size,
        "_PP": pc.pipeline_parallel_size,
        "_DP": pc.data_parallel_size,
        "_PCP": pc.prefill_context_parallel_size,
        "_DCP": pc.decode_context_parallel_size,
        "_ETP": 1,
        "_EPLB": 1,
        "_WORLD": pc.tensor_parallel_size
        * pc.pipeline_parallel_size
        * pc.data_parallel_size
        * pc.prefill_context_parallel_size,
    }
    groups = {name: _group(size) for name, size in sizes.items() if hasattr(parallel_state, name)}
    with _patched(parallel_state, **groups):
        moe = fused_moe_config.FusedMoEParallelConfig.make(
            pc.tensor_parallel_size, pc.prefill_context_parallel_size, pc.data_parallel_size, 1, pc
        )
        ep_size = int(moe.ep_size if moe.use_ep else 1)
        with _patched(parallel_state, _EP=_group(ep_size)):
            yield ep_size


@contextlib.contextmanager
def _patched(module: types.ModuleType, **names: Any) -> Iterator[None]:
    """Replace module globals for the block (only those the module has)."""
    saved = {k: getattr(module, k) for k in names if hasattr(module, k)}
    for key in saved:
        setattr(module, key, names[key])
    try:
        yield
    finally:
        for key, value in saved.items():
            setattr(module, key, value)


# ----------------------------------------------------------------------------------------------
# Guards
# ----------------------------------------------------------------------------------------------


GUARD_FUNCTION_PREFIXES = ("validate", "_validate", "check", "_check")


def _raised_by(exc: BaseException, functions: tuple[Callable[..., Any], ...]) -> bool:
    """True when `exc` was raised by a guard: the code of one of `functions` itself, or a vLLM
    function named validate*/check* that it called (e.g. `validate_fi_moe_ep_config`)."""
    codes = {getattr(f, "__code__", None) for f in functions}
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is None:
        return False
    code = last.tb_frame.f_code
    if code in codes:
        return True
    return "/vllm/" in code.co_filename and code.co_name.startswith(GUARD_FUNCTION_PREFIXES)


def _refusal(probe: str, exc: BaseException) -> dict[str, str]:
    return {"probe": probe, "error": type(exc).__name__, "message": str(exc).strip()}


def _run_guarded(
    probe: str, call: Callable[[], Any], guards: tuple[Callable[..., Any], ...]
) -> dict[str, str] | None:
    """Run `call`; a refusal when one of `guards` raised, None when it passed or hit a tripwire."""
    try:
        call()
    except Tripwire:
        return None
    except (NotImplementedError, ValueError, AssertionError, RuntimeError) as exc:
        if _raised_by(exc, guards):
            return _refusal(probe, exc)
        raise
    return None


def model_constructor(module: types.ModuleType, config: SimpleNamespace) -> dict[str, str] | None:
    """`DeepseekV4Model.__init__` up to its first read of the checkpoint config."""
    cls = module.DeepseekV4Model
    stub = cls.__new__(cls)
    guarded = SimpleNamespace(**vars(config))
    guarded.model_config = SimpleNamespace(
        hf_config=_ConfigTripwire(), architectures=config.model_config.architectures
    )
    return _run_guarded(
        "DeepseekV4Model.__init__",
        lambda: cls.__init__(stub, vllm_config=guarded, prefix="model"),
        (cls.__init__,),
    )


def moe_constructor(
    module: types.ModuleType, config: SimpleNamespace, ep_size: int, layer: int = 3
) -> dict[str, str] | None:
    """`DeepseekV4MoE.__init__` (and its MegaMoE expert set-up) up to building weights."""
    cls = module.DeepseekV4MoE
    stub = cls.__new__(cls)
    pc = config.parallel_config
    tp_for_moe = pc.tensor_parallel_size
    base_init = [
        c.__init__ for c in cls.__mro__ if c.__name__ in {"DeepseekV4MoE", "DeepseekV4MoEBase"}
    ]
    init_mega = getattr(cls, "_init_mega_moe_experts", None)
    guards = tuple(base_init) + ((init_mega,) if init_mega else ())

    tripwire = WeightsTripwire

    modules = {sys.modules[c.__module__] for c in cls.__mro__ if c.__module__.startswith("vllm.")}
    patches = {"GateLinear": tripwire}
    with contextlib.ExitStack() as stack:
        for mod in modules:
            stack.enter_context(_patched(mod, **patches))
        prefix = f"model.layers.{layer}.ffn"
        kwargs: dict[str, Any] = {"vllm_config": config, "prefix": prefix}
        if "num_hash_layers" in cls.__init__.__code__.co_varnames:
            kwargs["num_hash_layers"] = 0
        refusal = _run_guarded(
            "DeepseekV4MoE.__init__", lambda: cls.__init__(stub, **kwargs), guards
        )
        if refusal is not None or init_mega is None:
            return refusal
        if not getattr(stub, "use_native_mega_moe", getattr(stub, "use_mega_moe", False)):
            return None
        # The MegaMoE expert set-up (expert divisibility by the EP group), after the weights
        # the tripwire stopped: run it on its own, its expert class replaced by the tripwire.
        stub.n_shared_experts = config.model_config.hf_config.n_shared_experts
        stub.shared_experts = None
        stub.tp_size = tp_for_moe
        stub.use_sequence_parallel = False
        stub.n_routed_experts = getattr(stub, "n_routed_experts", None) or (
            config.model_config.hf_config.n_routed_experts
        )
        stub.n_activated_experts = config.model_config.hf_config.num_experts_per_tok
        stub.swiglu_limit = config.model_config.hf_config.swiglu_limit
        for mod in modules:
            stack.enter_context(
                _patched(mod, DeepGemmMegaMoEExperts=tripwire, DeepseekV4MegaMoEExperts=tripwire)
            )
        return _run_guarded(
            "DeepseekV4MoE._init_mega_moe_experts",
            lambda: init_mega(stub, config, config.model_config.hf_config, prefix),
            (init_mega,),
        )


def fused_moe_experts(
    module: types.ModuleType, config: SimpleNamespace, layer: int = 3
) -> dict[str, str] | None:
    """The FusedMoE expert set-up of a layer that does not take the MegaMoE path:
    `DeepseekV4MoE._init_fused_moe_experts` (0.30.0: the physical experts divide by TP) and
    `FusedMoEFactory` up to its EPLB check (physical experts divide over the EP group; redundant
    experts only with EPLB). The constructor runs first, up to its tripwire (the gate's weights),
    so the stub holds what it set (the layer's own expert count); the set-up then runs on its own,
    with what comes after the checks (the EPLB state, the expert map) as the tripwire."""
    cls = module.DeepseekV4MoE
    init_fused = getattr(cls, "_init_fused_moe_experts", None)
    if init_fused is None:
        return None
    stub = cls.__new__(cls)
    prefix = f"model.layers.{layer}.ffn"
    modules = {sys.modules[c.__module__] for c in cls.__mro__ if c.__module__.startswith("vllm.")}
    kwargs: dict[str, Any] = {"vllm_config": config, "prefix": prefix}
    if "num_hash_layers" in cls.__init__.__code__.co_varnames:
        kwargs["num_hash_layers"] = 0
    with contextlib.ExitStack() as stack:
        for mod in modules:
            stack.enter_context(_patched(mod, GateLinear=WeightsTripwire))
        try:
            cls.__init__(stub, **kwargs)
        except Tripwire:
            pass
        except Exception:
            return None  # a constructor guard refused: moe_constructor reports it
    if getattr(stub, "use_native_mega_moe", getattr(stub, "use_mega_moe", False)):
        return None
    hf = config.model_config.hf_config
    stub.reduce_results = getattr(stub, "reduce_results", True)
    stub.image_sentinel_lo = getattr(stub, "image_sentinel_lo", 0)
    stub.shared_experts = None
    stub.gate = SimpleNamespace(e_score_correction_bias=None, tid2eid=None, bias_vl=None)
    layer_module = importlib.import_module("vllm.model_executor.layers.fused_moe.layer")
    with contextlib.ExitStack() as stack:
        stack.enter_context(
            _patched(
                layer_module,
                get_current_vllm_config=lambda: config,
                EplbLayerState=WeightsTripwire,
                ExpertMapManager=WeightsTripwire,
            )
        )
        for mod in modules:
            stack.enter_context(_patched(mod, get_tensor_model_parallel_rank=lambda: 0))
        return _run_guarded(
            "DeepseekV4MoE._init_fused_moe_experts",
            lambda: init_fused(stub, config, hf, None, prefix),
            (init_fused, layer_module.FusedMoEFactory),
        )


def parallel_config_validation(engine_args: Any) -> dict[str, str] | None:
    """vLLM's own `ParallelConfig` validation of the parsed sizes, expert parallel and EPLB
    (what `create_engine_config` builds; the platform reports CUDA, as on the GPU node)."""
    ea = engine_args
    fields = parallel_module.ParallelConfig.__dataclass_fields__
    values = {
        "tensor_parallel_size": ea.tensor_parallel_size,
        "pipeline_parallel_size": ea.pipeline_parallel_size,
        "data_parallel_size": ea.data_parallel_size,
        "prefill_context_parallel_size": getattr(ea, "prefill_context_parallel_size", 1),
        "decode_context_parallel_size": getattr(ea, "decode_context_parallel_size", 1),
        "enable_expert_parallel": bool(ea.enable_expert_parallel),
        "enable_eplb": bool(ea.enable_eplb),
        "eplb_config": ea.eplb_config,
    }
    if ea.data_parallel_size_local is not None:
        values["data_parallel_size_local"] = ea.data_parallel_size_local
    platform = type(parallel_module.current_platform)
    pydantic = importlib.import_module("pydantic")
    with _patched_attr(platform, "is_cuda_alike", classmethod(lambda cls: True)):
        try:
            parallel_module.ParallelConfig(**{k: v for k, v in values.items() if k in fields})
        except pydantic.ValidationError as exc:
            messages = "; ".join(str(e.get("msg", "")) for e in exc.errors())
            return {"probe": "ParallelConfig", "error": "ValidationError", "message": messages}
    return None


@contextlib.contextmanager
def _patched_attr(owner: Any, name: str, value: Any) -> Iterator[None]:
    """Replace one attribute of a class for the block."""
    saved = owner.__dict__.get(name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if saved is None:
            delattr(owner, name)
        else:
            setattr(owner, name, saved)


def draft_moe_constructor(
    module: types.ModuleType, config: SimpleNamespace, ep_size: int, model: dict[str, Any]
) -> dict[str, str] | None:
    """V4.1's DSpark draft layers: the same MoE constructor past the target's last layer, where it
    takes `dspark_n_routed_experts` (only with speculative decoding)."""
    draft = model.get("num_draft_routed_experts")
    if config.speculative_config is None or not draft or model["architecture"] != V41_ARCH:
        return None
    hf = SimpleNamespace(**vars(config.model_config.hf_config))
    hf.dspark_n_routed_experts = draft
    draft_config = SimpleNamespace(**vars(config))
    draft_config.model_config = SimpleNamespace(
        hf_config=hf, architectures=config.model_config.architectures
    )
    return moe_constructor(module, draft_config, ep_size, layer=hf.num_hidden_layers)


def draft_fused_moe_experts(
    module: types.ModuleType, config: SimpleNamespace, model: dict[str, Any]
) -> dict[str, str] | None:
    """The FusedMoE expert set-up of V4.1's DSpark draft layers (see draft_moe_constructor)."""
    draft = model.get("num_draft_routed_experts")
    if config.speculative_config is None or not draft or model["architecture"] != V41_ARCH:
        return None
    hf = SimpleNamespace(**vars(config.model_config.hf_config))
    hf.dspark_n_routed_experts = draft
    draft_config = SimpleNamespace(**vars(config))
    draft_config.model_config = SimpleNamespace(
        hf_config=hf, architectures=config.model_config.architectures
    )
    return fused_moe_experts(module, draft_config, layer=hf.num_hidden_layers)


def mega_moe_capability(
    module: types.ModuleType, backend: str, hf: SimpleNamespace
) -> dict[str, str] | None:
    """The native MegaMoE capability and shape check: `check_deep_gemm_mega_moe_supported`, or
    `get_deep_gemm_mega_moe_backend` (0.32), or `DeepseekV4MegaMoEExperts._check_runtime_supported`
    (0.30, 0.31; run at weight load)."""
    if backend not in MEGA_MOE_BACKENDS or backend in FLASHINFER_MOE_EP_BACKENDS:
        return None
    import torch

    device = torch.device("cuda", 0)
    # 0.33: a check function; 0.32: the backend factory that runs the same checks.
    check = getattr(mega_moe_module, "check_deep_gemm_mega_moe_supported", None)
    probe = "check_deep_gemm_mega_moe_supported"
    if check is None:
        check = getattr(mega_moe_module, "get_deep_gemm_mega_moe_backend", None)
        probe = "get_deep_gemm_mega_moe_backend"
    if check is not None:

        def call() -> Any:
            return check(device, hf.hidden_size, hf.moe_intermediate_size)
    else:
        # V4.1 builds its MegaMoE experts with V4's class.
        experts = getattr(module, "DeepseekV4MegaMoEExperts", None) or getattr(
            model_modules[V4_ARCH], "DeepseekV4MegaMoEExperts", None
        )
        runtime_check = getattr(experts, "_check_runtime_supported", None)
        if runtime_check is None:
            # A release that moved the check again: say so rather than pass it silently.
            raise RuntimeError("no MegaMoE capability/shape check found in this release")
        probe = "DeepseekV4MegaMoEExperts._check_runtime_supported"
        stub = SimpleNamespace(
            w13_weight=SimpleNamespace(device=device),
            hidden_size=hf.hidden_size,
            intermediate_size=hf.moe_intermediate_size,
        )

        def call() -> Any:
            return runtime_check(stub)

    try:
        call()
    except (NotImplementedError, ValueError) as exc:
        return _refusal(probe, exc)
    return None


def flashinfer_moe_ep(backend: str, config: SimpleNamespace, ep_size: int) -> list[dict[str, str]]:
    """The FlashInfer moe_ep validators: model architecture, all2all, GPU, EP, EPLB/DBO."""
    refusals: list[dict[str, str]] = []
    if backend not in FLASHINFER_MOE_EP_BACKENDS:
        return refusals
    validate = getattr(kernel, "validate_flashinfer_moe_ep_model", None)
    if validate is not None:
        try:
            validate(backend, config.model_config.architectures)
        except ValueError as exc:
            refusals.append(_refusal("validate_flashinfer_moe_ep_model", exc))
    bind = getattr(kernel, "bind_passthrough_all2all_backend", None)
    if bind is not None:
        try:
            bind(backend, SimpleNamespace(**vars(config.parallel_config)))
        except ValueError as exc:
            refusals.append(_refusal("bind_passthrough_all2all_backend", exc))
    if fi_moe_ep is None:
        return refusals
    supports = getattr(fi_moe_ep, "supports_current_device", None)
    if supports is not None and not supports():
        refusals.append(
            {
                "probe": "flashinfer_moe_ep.supports_current_device",
                "error": "Unsupported",
                "message": "kernel does not support the current device",
            }
        )
    experts = getattr(fi_moe_ep_experts, "FlashInferMoeEpExperts", None)
    if experts is not None:
        moe_parallel = SimpleNamespace(
            use_ep=ep_size > 1 and config.parallel_config.enable_expert_parallel,
            use_batched_activation_format=False,
        )
        if not experts._supports_parallel_config(moe_parallel):
            refusals.append(
                {
                    "probe": "FlashInferMoeEpExperts._supports_parallel_config",
                    "error": "Unsupported",
                    "message": "kernel does not support parallel config without expert parallel",
                }
            )
    reasons_fn = getattr(fi_moe_ep, "flashinfer_moe_ep_unsupported_reasons", None)
    if reasons_fn is not None:
        import torch

        routing = fused_moe_config.RoutingMethodType.DeepseekV4
        moe = SimpleNamespace(
            moe_backend=backend,
            skip_final_all_reduce=False,
            in_dtype=torch.bfloat16,
            has_bias=False,
            swiglu_alpha=None,
            swiglu_beta=None,
            routing_method=routing,
        )
        # The weight scheme the checkpoint's experts load as: MXFP4 for fp4 experts, FP8 block
        # quantisation for fp8 ones (V4-Flash-Base).
        quant_utils = importlib.import_module(
            "vllm.model_executor.layers.quantization.utils.quant_utils"
        )
        fp4 = config.model_config.hf_config.expert_dtype == "fp4"
        weight_key = quant_utils.kMxfp4Static if fp4 else quant_utils.kFp8Static128BlockSym
        with _patched(fi_moe_ep, get_current_vllm_config=lambda: config):
            reasons = reasons_fn(moe, weight_key, None)
        if reasons:
            refusals.append(
                {
                    "probe": "flashinfer_moe_ep_unsupported_reasons",
                    "error": "Unsupported",
                    "message": f"kernel does not support {', '.join(reasons)}",
                }
            )
    return refusals


def guards(engine_args: Any, model: dict[str, Any]) -> tuple[list[dict[str, str]], bool]:
    """Every refusal of vLLM's guards for this configuration on the current (faked) GPU, and
    whether the model turns its sequence parallelism on."""
    module = model_modules[model["architecture"]]
    hf = hf_config(model)
    config = vllm_config(engine_args, model, hf)
    backend = config.kernel_config.moe_backend
    refusals: list[dict[str, str]] = []
    with fake_groups(config) as ep_size:
        for refusal in (
            model_constructor(module, config),
            moe_constructor(module, config, ep_size),
            fused_moe_experts(module, config),
            draft_moe_constructor(module, config, ep_size, model),
            draft_fused_moe_experts(module, config, model),
            mega_moe_capability(module, backend, hf),
        ):
            if refusal is not None:
                refusals.append(refusal)
        refusals.extend(flashinfer_moe_ep(backend, config, ep_size))
        sequence_parallel = bool(module._use_sequence_parallel(config))
    return refusals, sequence_parallel


# ----------------------------------------------------------------------------------------------
# Multi-node launch
# ----------------------------------------------------------------------------------------------


arg_utils = importlib.import_module("vllm.engine.arg_utils")
current_platform = importlib.import_module("vllm.platforms").current_platform


class _ParallelConfigBuilt(Exception):
    """Raised where `create_engine_config` has built its ParallelConfig: the launch is decided."""

    def __init__(self, config: Any) -> None:
        super().__init__("ParallelConfig")
        self.config = config


class _ParallelConfigTripwire:
    """Stands in for the `ParallelConfig` name in `vllm.engine.arg_utils`: builds the real one
    (running its own validation) and stops there; class attributes read through to the real one."""

    def __getattr__(self, name: str) -> Any:
        return getattr(parallel_module.ParallelConfig, name)

    def __call__(self, **kwargs: Any) -> Any:
        raise _ParallelConfigBuilt(parallel_module.ParallelConfig(**kwargs))


def _same_model(**kwargs: Any) -> tuple[Any, Any, Any]:
    """`maybe_override_with_speculators` without fetching the checkpoint config: no speculator."""
    return kwargs["model"], kwargs["tokenizer"], kwargs["vllm_speculative_config"]


def launch(args: Any) -> dict[str, Any]:
    """What `vllm serve` makes of this pod of a multi-node replica (see the module docstring)."""
    engine_args = vllm_cli.engine_args(args)  # its own copy: create_engine_config mutates it
    model_config = mock.MagicMock(name="model_config")
    model_config.is_moe = True  # DeepSeek V4 / V4.1 are MoE models
    patches = (
        mock.patch.object(arg_utils.EngineArgs, "create_model_config", lambda _self: model_config),
        mock.patch.object(arg_utils, "maybe_override_with_speculators", _same_model),
        mock.patch.object(arg_utils, "ParallelConfig", _ParallelConfigTripwire()),
        # The pods run on CUDA GPUs (ParallelConfig refuses EPLB on other platforms).
        mock.patch.object(type(current_platform), "is_cuda_alike", lambda _self: True),
    )
    try:
        with contextlib.ExitStack() as stack:
            for patch in patches:
                stack.enter_context(patch)
            engine_args.create_engine_config(headless=bool(getattr(args, "headless", False)))
    except _ParallelConfigBuilt as built:
        pc = built.config
    except (ValueError, AssertionError) as exc:  # pydantic's ValidationError is a ValueError
        return {"refusal": _refusal("create_engine_config", exc)}
    else:
        raise RuntimeError("create_engine_config returned without building a ParallelConfig")
    try:
        within = {
            "nnodes_within_dp": pc.nnodes_within_dp,
            "node_rank_within_dp": pc.node_rank_within_dp,
        }
        local_world_size = pc.local_world_size
    except ValueError as exc:  # 0.31+: nnodes not divisible by the DP node groups
        return {"refusal": _refusal("ParallelConfig.nnodes_within_dp", exc)}
    return {
        "data_parallel_rank": pc.data_parallel_rank,
        "data_parallel_size_local": pc.data_parallel_size_local,
        "world_size": pc.world_size,
        "local_world_size": local_world_size,
        **within,
    }


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------


def answer(top: Any, case: dict[str, Any]) -> dict[str, Any]:
    """vLLM's answer for one case."""
    result: dict[str, Any] = {"id": case["id"], "accepted": False}
    try:
        args = vllm_cli.parse_serve(top, list(case["argv"]))
        engine_args = vllm_cli.engine_args(args)
    except vllm_cli.ParserExit as exc:
        result["error"] = {"stage": "parser", "message": exc.message}
        return result
    except (ValueError, TypeError) as exc:
        result["error"] = {"stage": "serve-validation", "message": str(exc)}
        return result
    result["accepted"] = True
    result["parsed"] = parsed_values(args, engine_args)
    if (result["parsed"]["nnodes"] or 1) > 1:
        try:
            result["launch"] = launch(args)
        except Exception as exc:  # the oracle itself failed: report, never hide
            result["launch"] = {
                "oracle_error": "".join(traceback.format_exception_only(exc)).strip()
            }
    # The same on every GPU: reported with each capability's guards.
    try:
        parallel = parallel_config_validation(engine_args)
    except Exception as exc:  # the oracle itself failed: an unmapped refusal, never hidden
        parallel = {"probe": "ParallelConfig", "error": "OracleError", "message": repr(exc)}
    per_capability = []
    for major, minor in case.get("capabilities", []):
        with fake_platform.device_capability(major, minor):
            try:
                refusals, sp = guards(engine_args, case["model"])
                if parallel is not None:
                    refusals.insert(0, parallel)
            except Exception as exc:  # the oracle itself failed: report, never hide
                per_capability.append(
                    {
                        "capability": [major, minor],
                        "oracle_error": "".join(
                            traceback.format_exception(exc)
                            if os.environ.get("DSO_ORACLE_DEBUG")
                            else traceback.format_exception_only(exc)
                        ).strip(),
                    }
                )
                continue
        per_capability.append(
            {"capability": [major, minor], "refusals": refusals, "sequence_parallel": sp}
        )
    result["guards"] = per_capability
    return result


def main() -> int:
    """Answer every case read from stdin."""
    cases = json.load(sys.stdin)
    top, _serve = vllm_cli.build_parsers()
    answers = [answer(top, case) for case in cases]
    json.dump({"release": vllm_cli.release(), "answers": answers}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
