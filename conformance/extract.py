"""Export one vLLM release's facts as data the operator ships (catalog/vllm/<release>.json).

Run with a release's virtualenv python from the repository root:

    ~/.cache/deepseek-operator/vllm/0.33.0/bin/python -m conformance.extract \
        --out operator/deepseek_operator/catalog/vllm

What it writes, all read from the installed vLLM (names, sets, the parser's option table) or asked
of vLLM's own functions (which FlashInfer moe_ep backends are architecture-checked, which compute
capabilities those kernels accept, which spellings the parser accepts):

- `moe_backends`: the `MoEBackend` Literal of `vllm/config/kernel.py`, in its order;
- `mega_moe_backends`, `native_mega_moe_backends`, `flashinfer_moe_ep_backends`,
  `flashinfer_moe_ep_architectures`: the sets of the same file (sorted);
- `flashinfer_moe_ep_architecture_checked`: the backends `validate_flashinfer_moe_ep_model` refuses
  for a non-DeepSeek architecture;
- `flashinfer_moe_ep_capabilities`: the compute capabilities its `supports_current_device` accepts;
- `multi_node`: what a replica spanning several nodes (`--nnodes` > 1) meets: the
  `distributed_executor_backend` values `ParallelConfig` accepts with `nnodes` > 1 (asked of its own
  validation), and whether DeepGEMM's MegaMoE buffer is a torch symmetric-memory rendezvous over the
  EP group (peer GPU memory: NVLink between every rank, across nodes only inside one multi-node
  NVLink domain);
- `serve`: `vllm serve`'s options (every option string with its dest, whether it takes a value, how
  many values it takes (`values`: none, one, optional or many), its choices) and the parser's spelling rules (abbreviations, `_` for `-`, `--no-` forms, `--x.key`).
"""

from __future__ import annotations

import argparse
import json
import sys
import typing
from pathlib import Path
from typing import Any

from conformance import fake_platform, vllm_cli

# Compute capabilities probed (every CUDA GPU generation vLLM knows, 7.0 .. 12.1).
PROBED_CAPABILITIES = [
    (7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (10, 1), (10, 3), (11, 0),
    (12, 0), (12, 1),
]  # fmt: skip


def _sorted_or_none(value: Any) -> list[str] | None:
    return None if value is None else sorted(value)


def kernel_facts() -> dict[str, Any]:
    """Backend names and sets from `vllm.config.kernel`."""
    from vllm.config import kernel

    facts: dict[str, Any] = {
        "moe_backends": list(typing.get_args(kernel.MoEBackend)),
        "mega_moe_backends": _sorted_or_none(getattr(kernel, "MEGA_MOE_BACKENDS", None)),
        "native_mega_moe_backends": _sorted_or_none(
            getattr(kernel, "NATIVE_MEGA_MOE_BACKENDS", None)
        ),
        "flashinfer_moe_ep_backends": _sorted_or_none(
            getattr(kernel, "FLASHINFER_MOE_EP_BACKENDS", None)
        ),
        "flashinfer_moe_ep_architectures": _sorted_or_none(
            getattr(kernel, "FLASHINFER_MOE_EP_ARCHITECTURES", None)
        ),
    }
    validate = getattr(kernel, "validate_flashinfer_moe_ep_model", None)
    checked: list[str] | None = None
    if validate is not None:
        checked = []
        for backend in facts["flashinfer_moe_ep_backends"] or []:
            try:
                validate(backend, ["MixtralForCausalLM"])
            except ValueError:
                checked.append(backend)
    facts["flashinfer_moe_ep_architecture_checked"] = checked
    return facts


def flashinfer_moe_ep_capabilities() -> list[list[int]] | None:
    """Compute capabilities the FlashInfer moe_ep kernels accept (None: no such module)."""
    try:
        from vllm.model_executor.layers.fused_moe import flashinfer_moe_ep
    except ImportError:
        # Older releases: a constant beside the config-time validator.
        try:
            from vllm.utils import flashinfer_moe_ep as legacy
        except ImportError:
            return None
        constant = getattr(legacy, "FI_MOE_EP_SUPPORTED_CAPABILITIES", None)
        return None if constant is None else sorted([list(cc) for cc in constant])
    supports = getattr(flashinfer_moe_ep, "supports_current_device", None)
    if supports is None:
        return None
    accepted = []
    for major, minor in PROBED_CAPABILITIES:
        with fake_platform.device_capability(major, minor):
            if supports():
                accepted.append([major, minor])
    return accepted


def multi_node_facts() -> dict[str, Any]:
    """What a multi-node replica meets in this release (see the module docstring)."""
    from vllm.config import parallel

    accepted = []
    # external_launcher is left out: it needs a torchrun environment (RANK) to be constructed.
    probed = typing.get_args(parallel.DistributedExecutorBackend)
    for backend in [b for b in probed if b != "external_launcher"]:
        try:
            parallel.ParallelConfig(
                nnodes=2,
                node_rank=0,
                data_parallel_size=2,
                data_parallel_size_local=1,
                distributed_executor_backend=backend,
            )
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            if "nnodes" not in str(exc):
                raise  # another guard: this probe no longer isolates the multi-node one
            continue
        accepted.append(backend)
    try:
        from vllm.third_party.deep_gemm import mega
    except ImportError:
        symmetric = False
    else:
        symmetric = hasattr(mega, "symm_mem")
    return {"executor_backends": sorted(accepted), "mega_moe_symmetric_memory": symmetric}


def _accepts(top: argparse.ArgumentParser, argv: list[str]) -> bool:
    try:
        top.parse_args(argv)
    except (vllm_cli.ParserExit, ValueError):
        return False
    return True


def _values(nargs: Any) -> str:
    """How many command-line items an option consumes after it, from its argparse ``nargs``."""
    if nargs == 0:
        return "none"
    if nargs is None or nargs == 1:
        return "one"
    if nargs == argparse.OPTIONAL:
        return "optional"
    return "many"  # '*', '+', argparse.REMAINDER or a count above 1


def serve_options() -> dict[str, Any]:
    """`vllm serve`'s option table and the spelling rules its parser applies."""
    top, serve = vllm_cli.build_parsers()
    options: dict[str, dict[str, Any]] = {}
    for action in serve._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        takes_value = action.nargs != 0
        for option in action.option_strings:
            options[option] = {
                "dest": action.dest,
                "takes_value": takes_value,
                "values": _values(action.nargs),
                "choices": sorted(map(str, action.choices)) if action.choices else None,
            }
    model = "org/model"
    # Spelling rules, asked of the parser itself rather than read from its code.
    rules = {
        "abbreviations": _accepts(top, ["serve", model, "--tensor-parallel", "2"]),
        "underscores_for_dashes": _accepts(top, ["serve", model, "--tensor_parallel_size", "2"]),
        "equals_form": _accepts(top, ["serve", model, "--tensor-parallel-size=2"]),
        "dotted_config_keys": _accepts(
            top, ["serve", model, "--kernel-config.moe_backend", "triton"]
        ),
        "config_file_option": "--config" in options,
    }
    return {"options": dict(sorted(options.items())), "rules": rules}


def extract() -> dict[str, Any]:
    """Everything this module exports for the release it runs in."""
    facts: dict[str, Any] = {"release": vllm_cli.release()}
    facts.update(kernel_facts())
    facts["flashinfer_moe_ep_capabilities"] = flashinfer_moe_ep_capabilities()
    facts["multi_node"] = multi_node_facts()
    facts["serve"] = serve_options()
    return facts


def main(argv: list[str] | None = None) -> int:
    """Write <out>/<release>.json (or print it with --out -)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="-", help="directory for <release>.json, or - for stdout")
    options = parser.parse_args(argv)
    facts = extract()
    text = json.dumps(facts, indent=1, sort_keys=False) + "\n"
    if options.out == "-":
        sys.stdout.write(text)
    else:
        path = Path(options.out) / f"{facts['release']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
