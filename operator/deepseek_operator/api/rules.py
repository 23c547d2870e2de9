"""The static spec rules: one definition, two enforcers.

Each :class:`SpecRule` carries a CEL expression (rendered into the CRD as an
``x-kubernetes-validations`` entry, so the API server rejects the CR) and a Python predicate
(run by the pydantic models, so the offline ``render`` rejects the same CR) with ONE message, so
both say the same words. Only rules that need nothing but the spec live here; anything that
depends on nodes or on catalog facts is a status condition, never an admission error.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deepseek_operator.api import extra_args
from deepseek_operator.api.backends import (
    EPLB_REFUSED_BACKENDS,
    MEGA_MOE_BACKENDS,
    MOE_BACKENDS,
)
from deepseek_operator.api.eplb import (
    DOTTED_FORM,
    JSON_FORM,
    MAX_REDUNDANT_EXPERTS,
    REDUNDANT_MARK,
    canonical_redundant_experts_arg,
)
from deepseek_operator.catalog.vllm import supported_releases, vllm_release
from deepseek_operator.names import SERVICE_SUFFIX

if TYPE_CHECKING:
    from deepseek_operator.api.spec import DeepSeekServingSpec

# vLLM's own words (docs/decision-rules.md); the MegaMoE guard A1.
VLLM_MEGA_MOE_REQUIRES_EP = (
    "DeepSeek V4 MegaMoE currently requires expert parallel. Enable it with "
    "--enable-expert-parallel, or pick a different moe backend."
)

# Bounds (issue 11). Kubernetes keeps replica counts in int32 and vLLM its sizes in C ints; the
# bounds below keep every number, and every product the operator computes from them (GPUs per
# pod, pods per serving, EP size), far from any overflow, and cap how many objects one
# DeepSeekServing can make the operator create (a Service, a LeaderWorkerSet and its pods).
INT32_MAX = 2**31 - 1
MAX_REPLICAS = 1024
MAX_PARALLEL_SIZE = 1024
MAX_GPUS_PER_REPLICA = 16384
MAX_PODS_PER_SERVING = 1024
# Longest metadata.name: the deepest child names are LeaderWorkerSet's worker StatefulSet
# ``<name>-<group>`` and its pods ``<name>-<group>-<index>`` (at most 10 more characters at 1,024
# pods), whose ``controller-revision-hash`` label value adds 11 more and must stay a 63-character
# label value; the IMEX channel template is ``<name>-imex-channel``.
MAX_NAME_LENGTH = 40

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


def _cel_list(values: tuple[str, ...] | frozenset[str]) -> str:
    ordered = sorted(values) if isinstance(values, frozenset) else list(values)
    return "[" + ", ".join(f"'{v}'" for v in ordered) + "]"


def _cel_set(values: tuple[str, ...]) -> str:
    """A CEL map literal used as a set: ``x in {...}`` costs O(1), a list costs O(n)."""
    return "{" + ", ".join(f"'{v}': true" for v in values) + "}"


_NORMALIZED_BACKEND = "self.moeBackend.lowerAscii().replace('-', '_')"


@dataclass(frozen=True)
class SpecRule:
    """A static cross-field rule enforced by CEL in the CRD and by pydantic offline."""

    name: str
    scope: str  # "spec", "spec.parallelism" or "spec.engine": the schema node the CEL runs on
    field_path: str  # JSON path of the offending field, relative to ``scope`` (CEL fieldPath)
    cel: str
    message: str
    holds: Callable[[DeepSeekServingSpec], bool]
    value: Callable[[DeepSeekServingSpec], Any]
    # Runs on each item of the list at ``scope`` (the API server then names the item's index).
    per_item: bool = False
    # The offending item's path, e.g. ``spec.engine.extraArgs[2]`` (per-item rules).
    path_of: Callable[[DeepSeekServingSpec], str] | None = None

    @property
    def full_path(self) -> str:
        """The offending field's path from the object root, e.g. ``spec.moeBackend``."""
        return self.scope + self.field_path

    def refusal_path(self, spec: DeepSeekServingSpec) -> str:
        """Where ``spec`` breaks this rule: the item's path for a per-item rule."""
        return self.path_of(spec) if self.path_of else self.full_path


def _mega_requires_ep(spec: DeepSeekServingSpec) -> bool:
    return spec.moe_backend not in MEGA_MOE_BACKENDS or (spec.parallelism.expert_parallel)


def _known_backend(spec: DeepSeekServingSpec) -> bool:
    return spec.moe_backend in MOE_BACKENDS


def _fi_rejects_eplb(spec: DeepSeekServingSpec) -> bool:
    return spec.moe_backend not in EPLB_REFUSED_BACKENDS or (not spec.parallelism.enable_eplb)


def _dp_local_divides(spec: DeepSeekServingSpec) -> bool:
    p = spec.parallelism
    if p.data_parallel_size_local is None:
        return True
    local = p.data_parallel_size_local
    return local <= p.data_parallel_size and p.data_parallel_size % local == 0


def _dcp_divides_tp(spec: DeepSeekServingSpec) -> bool:
    p = spec.parallelism
    return p.tensor_parallel_size % p.decode_context_parallel_size == 0


def _no_gpu_in_resources(spec: DeepSeekServingSpec) -> bool:
    r = spec.resources
    return spec.gpu_resource_name not in r.limits and spec.gpu_resource_name not in r.requests


def _serve_options() -> dict[str, str]:
    """Every ``vllm serve`` option string of any supported release, with the dest it sets."""
    options: dict[str, str] = {}
    for release in supported_releases():
        for option, spec in vllm_release(release).serve_options.items():
            options.setdefault(option, spec.dest)
    return options


_SERVE_OPTIONS = _serve_options()
# Options that replace the model config the decision read (spec.model and the catalog):
# --hf-config-path loads another checkpoint's config.json, --quantization / --quantization-config
# replace the checkpoint's quantization method (which decides the expert kernels, R5).
MODEL_CONFIG_DESTS = frozenset({"hf_config_path", "quantization", "quantization_config"})
# What the rendered flags set, plus --model (the positional model's twin), --config (a YAML
# file of arguments could set any of them) and the model-config options above.
OWNED_DESTS = frozenset(
    {_SERVE_OPTIONS[f] for f in RENDERED_FLAGS} | {"model", "config"} | MODEL_CONFIG_DESTS
)
# Keys inside a JSON-valued flag that the operator sets (the dotted form of vLLM's parser).
_OWNED_JSON_KEYS: tuple[str, ...] = ("--kernel-config.moe-backend",)
OWNED_FLAGS: tuple[str, ...] = (
    tuple(sorted(o for o, dest in _SERVE_OPTIONS.items() if dest in OWNED_DESTS)) + _OWNED_JSON_KEYS
)
"""Every option string, in any supported release, that sets what a typed field sets."""
# Owned flags argparse would expand an abbreviation to (dotted JSON keys are matched below).
_ABBREVIABLE = tuple(f for f in OWNED_FLAGS if "." not in f)
# vLLM flags that exist in their own right although an owned flag starts with them (--tokenizer,
# -dc): used exactly, they are not an abbreviation of the owned one.
UNOWNED_PREFIX_FLAGS: tuple[str, ...] = tuple(
    sorted(
        o
        for o, dest in _SERVE_OPTIONS.items()
        if dest not in OWNED_DESTS and any(f.startswith(o) for f in _ABBREVIABLE)
    )
)


_CEL_KEY = "a.split('=')[0].replace('_', '-')"


def _flag_name(arg: str) -> str:
    # vLLM's parser treats '_' and '-' in flag names alike.
    return arg.split("=")[0].replace("_", "-")


def _owns(arg: str) -> bool:
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
        and any(f.startswith(key) for f in _ABBREVIABLE)
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
_MODEL_CONFIG_KEY_NAMES = tuple(
    dict.fromkeys(
        key
        for key, _ in MODEL_CONFIG_KEYS
        if not any(other != key and other in key for other, _ in MODEL_CONFIG_KEYS)
    )
)


def _keys_by_field() -> dict[str, list[str]]:
    by_field: dict[str, list[str]] = {}
    for key, field in MODEL_CONFIG_KEYS:
        by_field.setdefault(field, []).append(key)
    return by_field


def _mentions_model_config_key(arg: str) -> bool:
    """Whether ``arg`` names a model config key the decision reads, anywhere in it.

    Any mention is refused, wherever it sits: a JSON key of ``--hf-overrides`` (as ``=`` value or
    the next argument), at any depth (``{"text_config": {"norm_topk_prob": false}}``), or the
    dotted form ``--hf-overrides.text_config.norm_topk_prob``. vLLM passes these keys on verbatim
    (no '-' for '_'), and a ``\\u`` escape is refused by the typed-fields rule.
    """
    return any(key in arg for key in _MODEL_CONFIG_KEY_NAMES)


def _no_owned_flags(spec: DeepSeekServingSpec) -> bool:
    return not any(_owns(a) for a in spec.engine.extra_args)


def _first_owned_flag(spec: DeepSeekServingSpec) -> str:
    return next((a for a in spec.engine.extra_args if _owns(a)), "")


def _redundant_experts_canonical(spec: DeepSeekServingSpec) -> bool:
    return all(canonical_redundant_experts_arg(a) for a in spec.engine.extra_args)


def _first_redundant_experts_arg(spec: DeepSeekServingSpec) -> str:
    return next((a for a in spec.engine.extra_args if not canonical_redundant_experts_arg(a)), "")


def _no_model_config_keys(spec: DeepSeekServingSpec) -> bool:
    return not any(_mentions_model_config_key(a) for a in spec.engine.extra_args)


def _first_model_config_key(spec: DeepSeekServingSpec) -> str:
    return next((a for a in spec.engine.extra_args if _mentions_model_config_key(a)), "")


_CROSS_FIELD_RULES: tuple[SpecRule, ...] = (
    SpecRule(
        name="KnownMoEBackend",
        scope="spec",
        field_path=".moeBackend",
        cel=f"!has(self.moeBackend) || {_NORMALIZED_BACKEND} in {_cel_list(MOE_BACKENDS)}",
        message=(
            "spec.moeBackend must be 'auto' or one of vLLM's MoE backends ("
            + ", ".join(MOE_BACKENDS[1:])
            + "); case and '-' are normalised as vLLM does"
        ),
        holds=_known_backend,
        value=lambda s: s.moe_backend_as_written,
    ),
    SpecRule(
        name="MegaMoERequiresExpertParallel",
        scope="spec",
        field_path=".moeBackend",
        cel=(
            f"!has(self.moeBackend) || !({_NORMALIZED_BACKEND} in {_cel_list(MEGA_MOE_BACKENDS)})"
            " || (has(self.parallelism) && has(self.parallelism.expertParallel)"
            " && self.parallelism.expertParallel)"
        ),
        message=(
            "spec.moeBackend is a MegaMoE backend ("
            + ", ".join(sorted(MEGA_MOE_BACKENDS))
            + "), which requires spec.parallelism.expertParallel: true. vLLM: "
            + VLLM_MEGA_MOE_REQUIRES_EP
        ),
        holds=_mega_requires_ep,
        value=lambda s: s.moe_backend_as_written,
    ),
    SpecRule(
        name="FlashInferMoEEPRejectsEPLB",
        scope="spec",
        field_path=".parallelism.enableEplb",
        cel=(
            f"!has(self.moeBackend) || !({_NORMALIZED_BACKEND} in "
            f"{_cel_list(EPLB_REFUSED_BACKENDS)}) || !has(self.parallelism)"
            " || !has(self.parallelism.enableEplb) || !self.parallelism.enableEplb"
        ),
        message=(
            "spec.parallelism.enableEplb must be false with spec.moeBackend "
            + " or ".join(sorted(EPLB_REFUSED_BACKENDS))
            + ": vLLM: EPLB is not supported with these FlashInfer moe_ep backends. Use "
            "moe_backend=deep_gemm_mega_moe to run the mega path with EPLB."
        ),
        holds=_fi_rejects_eplb,
        value=lambda s: s.parallelism.enable_eplb,
    ),
    SpecRule(
        name="DataParallelSizeLocalDividesDataParallelSize",
        scope="spec.parallelism",
        field_path=".dataParallelSizeLocal",
        cel=(
            "!has(self.dataParallelSizeLocal) || (self.dataParallelSizeLocal <= "
            "(has(self.dataParallelSize) ? self.dataParallelSize : 1) && "
            "(has(self.dataParallelSize) ? self.dataParallelSize : 1) % "
            "self.dataParallelSizeLocal == 0)"
        ),
        message=(
            "spec.parallelism.dataParallelSizeLocal must be at most and divide "
            "spec.parallelism.dataParallelSize"
        ),
        holds=_dp_local_divides,
        value=lambda s: s.parallelism.data_parallel_size_local,
    ),
    SpecRule(
        name="DecodeContextParallelSizeDividesTensorParallelSize",
        scope="spec.parallelism",
        field_path=".decodeContextParallelSize",
        cel=(
            "!has(self.decodeContextParallelSize) || "
            "(has(self.tensorParallelSize) ? self.tensorParallelSize : 1) % "
            "self.decodeContextParallelSize == 0"
        ),
        message=(
            "spec.parallelism.decodeContextParallelSize must divide "
            "spec.parallelism.tensorParallelSize"
        ),
        holds=_dcp_divides_tp,
        value=lambda s: s.parallelism.decode_context_parallel_size,
    ),
    SpecRule(
        name="GPUResourceIsDerived",
        scope="spec",
        field_path=".resources",
        cel=(
            "!has(self.resources) || ("
            "(!has(self.resources.limits) || !((has(self.gpuResourceName) ? "
            "self.gpuResourceName : 'nvidia.com/gpu') in self.resources.limits)) && "
            "(!has(self.resources.requests) || !((has(self.gpuResourceName) ? "
            "self.gpuResourceName : 'nvidia.com/gpu') in self.resources.requests)))"
        ),
        message=(
            "spec.resources must not set the GPU resource (spec.gpuResourceName): the operator "
            "derives the GPU limit from the parallelism (TP x PP x local DP x PCP)"
        ),
        holds=_no_gpu_in_resources,
        value=lambda s: s.gpu_resource_name,
    ),
    SpecRule(
        name="ExtraArgsDoNotOverrideTypedFields",
        scope="spec.engine",
        field_path=".extraArgs",
        cel=(
            "!has(self.extraArgs) || self.extraArgs.all(a, "
            f"!({_CEL_KEY} in {_cel_set(OWNED_FLAGS)}) && "
            "!(a.startsWith('-') && !a.startsWith('--') && size(a) >= 2 && "
            f"a.substring(0, 2) in {_cel_set(OWNED_FLAGS)}) && "
            f"!(a.startsWith('-') && !({_CEL_KEY} in {_cel_set(UNOWNED_PREFIX_FLAGS)}) && "
            f"{_cel_list(_ABBREVIABLE)}.exists(f, f.startsWith({_CEL_KEY}))) && "
            "!a.contains('moe_backend') && !a.contains('moe-backend') && !a.contains('\\\\u'))"
        ),
        message=(
            "spec.engine.extraArgs must not set a flag the operator renders from a typed field "
            "(--moe-backend, parallelism, speculative decoding, ports and the typed engine "
            "flags) or that replaces the model config the decision read (--hf-config-path, "
            "--quantization), in any spelling vLLM's parser accepts (an abbreviation, '_' for '-', a "
            "dotted or \\u-escaped JSON key); set the typed field instead"
        ),
        holds=_no_owned_flags,
        value=_first_owned_flag,
    ),
    SpecRule(
        name="ExtraArgsDoNotOverrideModelConfig",
        scope="spec.engine",
        field_path=".extraArgs",
        cel=(
            "!has(self.extraArgs) || self.extraArgs.all(a, "
            + " && ".join(f"!a.contains('{key}')" for key in _MODEL_CONFIG_KEY_NAMES)
            + ")"
        ),
        message=(
            "spec.engine.extraArgs must not override a model config key the decision reads, in "
            "any form (a --hf-overrides JSON key at any depth, the dotted --hf-overrides.KEY "
            "form); set the typed field instead: "
            + "; ".join(f"{', '.join(keys)}: {field}" for field, keys in _keys_by_field().items())
        ),
        holds=_no_model_config_keys,
        value=_first_model_config_key,
    ),
)


_EXTRA_ARGS_RULES: tuple[SpecRule, ...] = (
    SpecRule(
        name="ExtraArgsRedundantExpertsSpelling",
        scope="spec.engine",
        field_path=".extraArgs",
        cel=(
            "!has(self.extraArgs) || self.extraArgs.all(a, "
            f"!a.contains('{REDUNDANT_MARK}') || "
            f"(a.indexOf('{REDUNDANT_MARK}') == a.lastIndexOf('{REDUNDANT_MARK}') && "
            f"(a.matches(r'{DOTTED_FORM}') || a.matches(r'{JSON_FORM}'))))"
        ),
        message=(
            "spec.engine.extraArgs may set EPLB redundant experts (the decision reads them) only "
            "as --eplb-config.num_redundant_experts=N or as the JSON object of --eplb-config "
            '(--eplb-config={"num_redundant_experts": N, ...} or --eplb-config followed by the '
            f"object): N a plain integer from 0 to {MAX_REDUNDANT_EXPERTS}, the key "
            "named once, the object flat"
        ),
        holds=_redundant_experts_canonical,
        value=_first_redundant_experts_arg,
    ),
)


_EARLIER_ARG_RULES = (
    "ExtraArgsDoNotOverrideTypedFields",
    "ExtraArgsDoNotOverrideModelConfig",
    "ExtraArgsRedundantExpertsSpelling",
)
_LIST_PREFIX = "!has(self.extraArgs) || self.extraArgs.all(a, "


def _item_cel(rule: SpecRule) -> str:
    """The per-item body (over ``a``) of a rule written as ``self.extraArgs.all(a, …)``."""
    assert rule.cel.startswith(_LIST_PREFIX) and rule.cel.endswith(")")
    return rule.cel[len(_LIST_PREFIX) : -1]


def _option_ok(arg: str) -> bool:
    # Items an earlier extraArgs rule refuses are left to it (its message is more specific).
    return (
        extra_args.option_ok(arg)
        or _owns(arg)
        or _mentions_model_config_key(arg)
        or not canonical_redundant_experts_arg(arg)
    )


def _first_bad_option(spec: DeepSeekServingSpec) -> int:
    return next(i for i, a in enumerate(spec.engine.extra_args) if not _option_ok(a))


def _first_bad_value(spec: DeepSeekServingSpec) -> int:
    index = extra_args.first_bad_value(list(spec.engine.extra_args))
    return -1 if index is None else index


# extraArgs read as vLLM's parser reads them (api/extra_args.py): an option no supported release
# has, in any spelling, crash-loops the pod ("unrecognized arguments").
_VLLM_ARGV_RULES: tuple[SpecRule, ...] = (
    SpecRule(
        name="ExtraArgsAreVLLMOptions",
        scope="spec.engine.extraArgs",
        field_path="",
        # An item an earlier extraArgs rule refuses gets that rule's more specific message.
        cel=(
            f"{extra_args.OPTION_CEL} || [self].exists(a, "
            + " || ".join(
                f"!({_item_cel(r)})"
                for r in _CROSS_FIELD_RULES + _EXTRA_ARGS_RULES
                if r.name in _EARLIER_ARG_RULES
            )
            + ")"
        ),
        message=extra_args.TEXTS.option,
        holds=lambda s: all(_option_ok(a) for a in s.engine.extra_args),
        value=lambda s: s.engine.extra_args[_first_bad_option(s)],
        per_item=True,
        path_of=lambda s: f"spec.engine.extraArgs[{_first_bad_option(s)}]",
    ),
    SpecRule(
        name="ExtraArgsValuesFollowAnOption",
        scope="spec.engine",
        field_path=".extraArgs",
        cel=extra_args.VALUES_CEL,
        message=extra_args.VALUES_MESSAGE,
        holds=lambda s: extra_args.first_bad_value(list(s.engine.extra_args)) is None,
        value=lambda s: s.engine.extra_args[_first_bad_value(s)],
    ),
)

# spec.model.name is the positional model of `vllm serve`: a Hugging Face repo id (huggingface_hub's
# validate_repo_id: [owner/]name of letters, digits, '_', '-', '.', each part starting and ending
# with a letter, digit or '_', no '--' or '..', the name at most 96 characters) or an absolute path.
HF_REPO_ID = r"^([A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?/)?[A-Za-z0-9_]([A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?$"


def _model_name_ok(spec: DeepSeekServingSpec) -> bool:
    name = spec.model.name
    if name.startswith("/"):
        return re.search(extra_args.CONTROL, name) is None
    return re.match(HF_REPO_ID, name) is not None and "--" not in name and ".." not in name


MODEL_NAME_RULE = SpecRule(
    name="ModelNameIsARepoIdOrPath",
    scope="spec.model",
    field_path=".name",
    cel=(
        "!has(self.name) || (self.name.startsWith('/') ? "
        f"!self.name.matches(r'{extra_args.CONTROL}') : "
        f"(self.name.matches(r'{HF_REPO_ID}') && !self.name.contains('--') && "
        "!self.name.contains('..')))"
    ),
    message=(
        "spec.model.name must be a Hugging Face repo id ([owner/]name: letters, digits, '_', '-' "
        "and '.', each part starting and ending with a letter, digit or '_', no '--' or '..', "
        "the name at most 96 characters) or an absolute path without control characters"
    ),
    holds=_model_name_ok,
    value=lambda s: s.model.name,
)


def _or_one(path: str) -> str:
    """CEL for an optional size field read as its default 1 when unset."""
    *parent, leaf = path.split(".")
    owner = ".".join(["self", *parent])
    guard = " && ".join(f"has({'.'.join(['self', *parent[: i + 1]])})" for i in range(len(parent)))
    test = f"{guard} && has({owner}.{leaf})" if guard else f"has({owner}.{leaf})"
    return f"({test} ? {owner}.{leaf} : 1)"


def _gpus_per_replica(spec: DeepSeekServingSpec) -> int:
    p = spec.parallelism
    return (
        p.tensor_parallel_size
        * p.pipeline_parallel_size
        * p.data_parallel_size
        * p.prefill_context_parallel_size
    )


def _pods_per_serving(spec: DeepSeekServingSpec) -> int:
    p = spec.parallelism
    return spec.replicas * (p.data_parallel_size // p.dp_local)


_DP = _or_one("parallelism.dataParallelSize")
_DP_LOCAL = (
    "(has(self.parallelism) && has(self.parallelism.dataParallelSizeLocal) ? "
    f"self.parallelism.dataParallelSizeLocal : {_DP})"
)

BOUND_RULES: tuple[SpecRule, ...] = (
    SpecRule(
        name="GPUsPerReplicaBounded",
        scope="spec.parallelism",
        field_path=".dataParallelSize",
        cel=(
            " * ".join(
                _or_one(f)
                for f in (
                    "tensorParallelSize",
                    "pipelineParallelSize",
                    "dataParallelSize",
                    "prefillContextParallelSize",
                )
            )
            + f" <= {MAX_GPUS_PER_REPLICA}"
        ),
        message=(
            "spec.parallelism: tensorParallelSize x pipelineParallelSize x dataParallelSize x "
            f"prefillContextParallelSize (GPUs per replica) must be at most {MAX_GPUS_PER_REPLICA}"
        ),
        holds=lambda s: _gpus_per_replica(s) <= MAX_GPUS_PER_REPLICA,
        value=_gpus_per_replica,
    ),
    SpecRule(
        name="PodsPerServingBounded",
        scope="spec",
        field_path=".replicas",
        cel=(f"{_or_one('replicas')} * ({_DP} / {_DP_LOCAL}) <= {MAX_PODS_PER_SERVING}"),
        message=(
            "spec.replicas x (spec.parallelism.dataParallelSize / dataParallelSizeLocal) (pods "
            f"of this DeepSeekServing) must be at most {MAX_PODS_PER_SERVING}"
        ),
        holds=lambda s: _pods_per_serving(s) <= MAX_PODS_PER_SERVING,
        value=_pods_per_serving,
    ),
)

# String fields rendered as the value of a vLLM flag (or, for model.name, as the positional model
# argument): a leading '-' would make vLLM's parser read the value as a flag of its own.
_FLAG_VALUE_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("spec.model", "name", "name"),
    ("spec.model", "revision", "revision"),
    ("spec.model", "servedModelName", "served_model_name"),
    ("spec.engine", "kvCacheDtype", "kv_cache_dtype"),
    ("spec.engine", "tokenizerMode", "tokenizer_mode"),
    ("spec.engine", "reasoningParser", "reasoning_parser"),
    ("spec.engine", "toolCallParser", "tool_call_parser"),
)


def _field_value(spec: DeepSeekServingSpec, scope: str, attr: str) -> Any:
    section = spec.model if scope == "spec.model" else spec.engine
    return getattr(section, attr)


def _no_leading_dash(scope: str, attr: str) -> Callable[[DeepSeekServingSpec], bool]:
    def holds(spec: DeepSeekServingSpec) -> bool:
        value = _field_value(spec, scope, attr)
        return value is None or not value.startswith("-")

    return holds


def _value_of(scope: str, attr: str) -> Callable[[DeepSeekServingSpec], Any]:
    return lambda spec: _field_value(spec, scope, attr)


DASH_RULES: tuple[SpecRule, ...] = tuple(
    SpecRule(
        name=f"{field[0].upper()}{field[1:]}IsNotAFlag",
        scope=scope,
        field_path=f".{field}",
        cel=f"!has(self.{field}) || !self.{field}.startsWith('-')",
        message=(
            f"{scope}.{field} must not start with '-': vLLM would read it as a command-line flag"
        ),
        holds=_no_leading_dash(scope, attr),
        value=_value_of(scope, attr),
    )
    for scope, field, attr in _FLAG_VALUE_FIELDS
)

SPEC_RULES = (
    _CROSS_FIELD_RULES
    + _EXTRA_ARGS_RULES
    + _VLLM_ARGV_RULES
    + BOUND_RULES
    + DASH_RULES
    + (MODEL_NAME_RULE,)
)
"""Every static rule, in the order they are checked."""


@dataclass(frozen=True)
class NameRule:
    """The rule on ``metadata.name``: CEL on the CRD's root (run offline by api/admission.py)."""

    cel: str
    message: str


NAME_RULE = NameRule(
    cel=(
        f"size(self.metadata.name) <= {MAX_NAME_LENGTH} && "
        "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && "
        f"!self.metadata.name.endsWith('{SERVICE_SUFFIX}')"
    ),
    message=(
        "metadata.name must be a DNS-1035 label (lower-case letters, digits and '-', starting "
        f"with a letter and ending with a letter or digit) of at most {MAX_NAME_LENGTH} "
        f"characters, not ending in '{SERVICE_SUFFIX}': the operator names its LeaderWorkerSet "
        f"after it and its Service <name>{SERVICE_SUFFIX}, and LeaderWorkerSet names a headless "
        "Service after the LeaderWorkerSet, so a serving 'x-api' would take serving 'x''s name"
    ),
)


def rules_for_scope(scope: str) -> list[SpecRule]:
    """The rules whose CEL expression runs on the schema node at ``scope``."""
    return [r for r in SPEC_RULES if r.scope == scope]
