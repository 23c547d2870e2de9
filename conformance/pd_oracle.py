"""vLLM's own answer about a disaggregated serving's pods, for one release, in one process.

Run with a release's virtualenv python from the repository root; reads a JSON array of cases on
stdin, writes the answers on stdout:

    ~/.cache/deepseek-operator/vllm/0.33.0/bin/python -m conformance.pd_oracle < cases.json

A case: ``{"id": str, "model": {"num_kv_heads", "head_size", "num_hidden_layers"},
"pods": [{"role": "prefill", "argv": ["serve", MODEL, ...]}, ...]}`` (every pod template of both
roles). An answer per pod: ``accepted`` (vLLM's serve parser, ``vllm serve``'s validation and
``AsyncEngineArgs.from_cli_args`` took the argv), ``error``, the parsed ``KVTransferConfig``'s
``kv_connector`` and ``kv_role`` (vLLM's own pydantic class, from the engine args), and
``hash``: the release's own ``compute_nixl_compatibility_hash`` on a config built from the
parsed engine args; ``decode_backend`` (the parsed ``additional_config``'s) and
``sleep_mode_refused``: with ``--enable-sleep-mode``, whether the release's
``VllmConfig._verify_kv_transfer_compat`` refuses the connector class its own
``KVConnectorFactory`` picks for the parsed ``KVTransferConfig`` (releases without that check
refuse nothing). Per release, ``specialized_decode_refuses_kv_transfer``: whether V4.1's
specialized decode requirements (``specialized_decode.unsupported``) include no KV transfer.

What the hash reads that a stand-in must supply: the model's KV heads, head size and layers
(from the checkpoint: one checkpoint per case, the same for both roles) and the attention
backend's name. The backend is the one ``--attention-backend`` forces, else one name for the
platform: both roles run on the same GPU type here, which is what the operator places.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace
from typing import Any

from conformance import vllm_cli

# Both roles' pods land on the same GPU type in the matrix: one selected backend for both.
PLATFORM_ATTENTION_BACKEND = "platform-default"


def _speculative(engine_args: Any) -> Any:
    """A stand-in SpeculativeConfig with what the hash reads (vLLM's own use_eagle methods)."""
    raw = engine_args.speculative_config
    if not raw:
        return None
    from vllm.config.speculative import SpeculativeConfig

    method = raw.get("method")
    spec = SimpleNamespace(
        method=method,
        parallel_drafting=raw.get("parallel_drafting", False),
        kv_cache_dtype=raw.get("kv_cache_dtype"),
        draft_model_config=SimpleNamespace(
            model=raw.get("model") or engine_args.model,
            revision=raw.get("revision") or engine_args.revision,
            code_revision=raw.get("code_revision"),
            hf_config=SimpleNamespace(),
        ),
    )
    spec.use_eagle = lambda: SpeculativeConfig.use_eagle(spec)  # type: ignore[arg-type]
    return spec


def config_of(engine_args: Any, model: dict[str, Any]) -> SimpleNamespace:
    """The parts of a VllmConfig that ``compute_nixl_compatibility_hash`` reads."""
    model_config = SimpleNamespace(
        model=engine_args.model,
        dtype=engine_args.dtype,
        get_total_num_kv_heads=lambda: model["num_kv_heads"],
        get_head_size=lambda: model["head_size"],
        get_total_num_hidden_layers=lambda: model["num_hidden_layers"],
    )
    return SimpleNamespace(
        model_config=model_config,
        cache_config=SimpleNamespace(cache_dtype=engine_args.kv_cache_dtype),
        scheduler_config=SimpleNamespace(
            disable_hybrid_kv_cache_manager=engine_args.disable_hybrid_kv_cache_manager
        ),
        speculative_config=_speculative(engine_args),
    )


def answer_pod(top: Any, pod: dict[str, Any], model: dict[str, Any], hasher: Any) -> dict[str, Any]:
    """vLLM's answer for one pod's argv."""
    out: dict[str, Any] = {"role": pod["role"], "accepted": False}
    try:
        args = vllm_cli.parse_serve(top, list(pod["argv"]))
        engine_args = vllm_cli.engine_args(args)
    except vllm_cli.ParserExit as exc:
        out["error"] = f"parser: {exc.message}"
        return out
    except (ValueError, TypeError) as exc:
        out["error"] = f"serve-validation: {exc}"
        return out
    out["accepted"] = True
    kv = engine_args.kv_transfer_config
    out["kv_transfer_config"] = type(kv).__name__
    out["kv_connector"] = getattr(kv, "kv_connector", None)
    out["kv_role"] = getattr(kv, "kv_role", None)
    backend = engine_args.attention_backend or PLATFORM_ATTENTION_BACKEND
    out["hash"] = hasher(config_of(engine_args, model), str(backend), "pull")
    extra = engine_args.additional_config
    out["decode_backend"] = extra.get("decode_backend") if isinstance(extra, dict) else None
    out["sleep_mode_refused"] = bool(engine_args.enable_sleep_mode) and sleep_mode_refused(kv)
    return out


def sleep_mode_refused(kv_transfer_config: Any) -> bool:
    """The release's own sleep-mode check of a KV connector (``_verify_kv_transfer_compat``)."""
    import inspect

    from vllm.config import VllmConfig

    verify = getattr(VllmConfig, "_verify_kv_transfer_compat", None)
    if verify is None or "supports_sleep_mode" not in inspect.getsource(verify):
        return False
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    connector = KVConnectorFactory.get_connector_class(kv_transfer_config)
    return not connector.supports_sleep_mode(kv_transfer_config)


def specialized_decode_refuses_kv_transfer() -> bool:
    """Whether the release has V4.1's specialized decode and it requires no KV transfer."""
    import importlib
    import inspect

    try:
        module = importlib.import_module("vllm.models.deepseek_v41.nvidia.specialized_decode")
    except ImportError:
        return False
    return "kv_transfer_config is None" in inspect.getsource(module.unsupported)


def main() -> int:
    """Answer every case read from stdin."""
    cases = json.load(sys.stdin)
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.metadata import (
        compute_nixl_compatibility_hash,
    )

    top, _serve = vllm_cli.build_parsers()
    answers = [
        {
            "id": case["id"],
            "pods": [
                answer_pod(top, pod, case["model"], compute_nixl_compatibility_hash)
                for pod in case["pods"]
            ],
        }
        for case in cases
    ]
    json.dump(
        {
            "release": vllm_cli.release(),
            "answers": answers,
            "specialized_decode_refuses_kv_transfer": specialized_decode_refuses_kv_transfer(),
        },
        sys.stdout,
    )
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
