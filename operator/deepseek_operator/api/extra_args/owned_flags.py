"""The vLLM flags and model config keys the operator owns, which ``extraArgs`` must not set.

The rendered flags come from typed fields and the decision; setting one again in
``spec.engine.extraArgs`` would make the last one win inside vLLM's argparse and silently undo the
decision. vLLM's own option table (catalog/vllm, exported from each supported release) gives every
other spelling of them. :func:`owns` and :func:`mentions_model_config_key` read one argument as
vLLM's parser would; :mod:`deepseek_operator.api.rules.extra_args` turns them into rules.
"""

from __future__ import annotations

from deepseek_operator.catalog.vllm import supported_releases, vllm_release

# The flags argv.py renders from typed fields and the decision. Setting one again in extraArgs
# would make the last one win inside vLLM's argparse and silently undo the decision; vLLM's own
# option table (catalog/vllm, exported from each supported release) gives every other spelling.
RENDERED_FLAGS: tuple[str, ...] = (
    "--moe-backend",
    "--tensor-parallel-size",
    "-tp",
    "--pipeline-parallel-size",
    "-pp",
    "--data-parallel-size",
    "-dp",
    "--data-parallel-size-local",
    "-dpl",
    "--data-parallel-rank",
    "-dpn",
    "--data-parallel-start-rank",
    "-dpr",
    "--data-parallel-address",
    "-dpa",
    "--data-parallel-rpc-port",
    "-dpp",
    "--data-parallel-backend",
    "-dpb",
    "--headless",
    "--nnodes",
    "-n",
    "--node-rank",
    "-r",
    "--master-addr",
    "--master-port",
    "--enable-expert-parallel",
    "--no-enable-expert-parallel",
    "-ep",
    "--enable-eplb",
    "--decode-context-parallel-size",
    "-dcp",
    "--prefill-context-parallel-size",
    "-pcp",
    "--distributed-executor-backend",
    "--speculative-config",
    "-sc",
    "--enable-dbo",
    "--no-enable-dbo",
    "--ubatch-size",
    "--served-model-name",
    "--revision",
    "--port",
    "--host",
    "--max-model-len",
    "--kv-cache-dtype",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--enable-prefix-caching",
    "--no-enable-prefix-caching",
    "--tokenizer-mode",
    "--reasoning-parser",
    "--tool-call-parser",
    "--enable-auto-tool-choice",
    "--gpu-memory-utilization",
    "--kv-cache-memory-bytes",
    "--trust-remote-code",
    "--block-size",
)


def _serve_options() -> dict[str, str]:
    """Every ``vllm serve`` option string of any supported release, with the dest it sets."""
    options: dict[str, str] = {}
    for release in supported_releases():
        for option, spec in vllm_release(release).serve_options.items():
            options.setdefault(option, spec.dest)
    return options


SERVE_OPTIONS = _serve_options()
# Options that replace the model config the decision read (spec.model and the catalog):
# --hf-config-path loads another checkpoint's config.json, --quantization / --quantization-config
# replace the checkpoint's quantization method (which decides the expert kernels, R5).
MODEL_CONFIG_DESTS = frozenset({"hf_config_path", "quantization", "quantization_config"})
# What the rendered flags set, plus --model (the positional model's twin), --config (a YAML
# file of arguments could set any of them) and the model-config options above.
OWNED_DESTS = frozenset(
    {SERVE_OPTIONS[f] for f in RENDERED_FLAGS} | {"model", "config"} | MODEL_CONFIG_DESTS
)
# Keys inside a JSON-valued flag that the operator sets (the dotted form of vLLM's parser).
OWNED_JSON_KEYS: tuple[str, ...] = ("--kernel-config.moe-backend",)
OWNED_FLAGS: tuple[str, ...] = (
    tuple(sorted(o for o, dest in SERVE_OPTIONS.items() if dest in OWNED_DESTS)) + OWNED_JSON_KEYS
)
"""Every option string, in any supported release, that sets what a typed field sets."""
# Owned flags argparse would expand an abbreviation to (dotted JSON keys are matched below).
ABBREVIABLE_FLAGS = tuple(f for f in OWNED_FLAGS if "." not in f)
# vLLM flags that exist in their own right although an owned flag starts with them (--tokenizer,
# -dc): used exactly, they are not an abbreviation of the owned one.
UNOWNED_PREFIX_FLAGS: tuple[str, ...] = tuple(
    sorted(
        o
        for o, dest in SERVE_OPTIONS.items()
        if dest not in OWNED_DESTS and any(f.startswith(o) for f in ABBREVIABLE_FLAGS)
    )
)


CEL_FLAG_KEY = "a.split('=')[0].replace('_', '-')"


def _flag_name(arg: str) -> str:
    # vLLM's parser treats '_' and '-' in flag names alike.
    return arg.split("=")[0].replace("_", "-")


def owns(arg: str) -> bool:
    """Whether vLLM's parser would read ``arg`` as (part of) a flag the operator renders.

    argparse expands any unambiguous prefix of a long flag (``--trust-remote`` is
    ``--trust-remote-code``), reads ``-n4`` as ``-n 4``, and vLLM accepts ``_`` for ``-`` and
    JSON flags in dotted form; a JSON value may hide a key behind a ``\\u`` escape.
    """
    key = _flag_name(arg)
    if key in OWNED_FLAGS:
        return True
    if arg.startswith("-") and not arg.startswith("--") and key[:2] in OWNED_FLAGS:
        return True
    if (
        arg.startswith("-")
        and key not in UNOWNED_PREFIX_FLAGS
        and any(f.startswith(key) for f in ABBREVIABLE_FLAGS)
    ):
        return True
    # Any mention of moe_backend (e.g. --kernel-config moe_backend=...) would override too.
    return "moe_backend" in arg or "moe-backend" in arg or "\\u" in arg


# Hugging Face config keys the decision reads, each with the typed field that states it. vLLM
# applies --hf-overrides to the checkpoint's config (flat keys with config.update, nested objects
# into sub-configs), so a key here would change under the decision what it decided on. Aliases
# count: DeepSeek V4's config maps num_local_experts to n_routed_experts and intermediate_size to
# moe_intermediate_size (transformers' attribute_map); V4.1 keeps expert_dtype in
# quantization_config, whose quant_method and moe_quant_algo decide the expert kernels too.
MODEL_CONFIG_KEYS: tuple[tuple[str, str], ...] = (
    ("architectures", "spec.model.architecture"),
    ("model_type", "spec.model.architecture"),
    ("expert_dtype", "spec.model.expertDtype"),
    ("quantization_config", "spec.model.expertDtype"),
    ("quant_method", "spec.model.expertDtype"),
    ("moe_quant_algo", "spec.model.expertDtype"),
    ("scoring_func", "spec.model.scoringFunc"),
    ("norm_topk_prob", "spec.model.normTopkProb"),
    ("hidden_size", "spec.model.hiddenSize"),
    ("moe_intermediate_size", "spec.model.moeIntermediateSize"),
    ("intermediate_size", "spec.model.moeIntermediateSize"),
    ("n_routed_experts", "spec.model.numRoutedExperts"),
    ("num_local_experts", "spec.model.numRoutedExperts"),
    ("dspark_n_routed_experts", "spec.model.numDraftRoutedExperts"),
)
# The shortest spellings to look for: a key that contains another (moe_intermediate_size,
# dspark_n_routed_experts) is found by that one.
MODEL_CONFIG_KEY_NAMES = tuple(
    dict.fromkeys(
        key
        for key, _ in MODEL_CONFIG_KEYS
        if not any(other != key and other in key for other, _ in MODEL_CONFIG_KEYS)
    )
)


def keys_by_field() -> dict[str, list[str]]:
    """The model config keys grouped by the typed field that states them."""
    by_field: dict[str, list[str]] = {}
    for key, field in MODEL_CONFIG_KEYS:
        by_field.setdefault(field, []).append(key)
    return by_field


def mentions_model_config_key(arg: str) -> bool:
    """Whether ``arg`` names a model config key the decision reads, anywhere in it.

    Any mention is refused, wherever it sits: a JSON key of ``--hf-overrides`` (as ``=`` value or
    the next argument), at any depth (``{"text_config": {"norm_topk_prob": false}}``), or the
    dotted form ``--hf-overrides.text_config.norm_topk_prob``. vLLM passes these keys on verbatim
    (no '-' for '_'), and a ``\\u`` escape is refused by the typed-fields rule.
    """
    return any(key in arg for key in MODEL_CONFIG_KEY_NAMES)
