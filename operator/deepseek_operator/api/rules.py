"""The static spec rules: one definition, two enforcers.

Each :class:`~deepseek_operator.api.spec_rule.SpecRule` carries a CEL expression (rendered into
the CRD as an ``x-kubernetes-validations`` entry, so the API server rejects the CR) and a Python
predicate (run by the loader on a parsed spec, :func:`check_spec`, so the offline ``render``
rejects the same CR) with ONE message, so both say the same words. This module holds the
cross-field and extraArgs rules and the ordered table of all of them (:data:`SPEC_RULES`); the
rules on single values are in :mod:`.value_rules`, the flags they protect in :mod:`.owned_flags`.
Only rules that need nothing but the spec live here; anything that depends on nodes or on catalog
facts is a status condition, never an admission error.
"""

from __future__ import annotations

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
from deepseek_operator.api.owned_flags import (
    ABBREVIABLE_FLAGS,
    CEL_FLAG_KEY,
    MODEL_CONFIG_KEY_NAMES,
    OWNED_FLAGS,
    UNOWNED_PREFIX_FLAGS,
    keys_by_field,
    mentions_model_config_key,
    owns,
)
from deepseek_operator.api.role_rules import AGGREGATED_ONLY_RULES, DISAGGREGATION_RULES
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.api.spec_rule import NORMALIZED_BACKEND_CEL, SpecRule, cel_list, cel_set
from deepseek_operator.api.value_rules import BOUND_RULES, DASH_RULES, MODEL_NAME_RULE
from deepseek_operator.errors import SpecError

# vLLM's own words (docs/decision-rules.md); the MegaMoE guard A1.
VLLM_MEGA_MOE_REQUIRES_EP = (
    "DeepSeek V4 MegaMoE currently requires expert parallel. Enable it with "
    "--enable-expert-parallel, or pick a different moe backend."
)


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


def _no_owned_flags(spec: DeepSeekServingSpec) -> bool:
    return not any(owns(a) for a in spec.engine.extra_args)


def _first_owned_flag(spec: DeepSeekServingSpec) -> str:
    return next((a for a in spec.engine.extra_args if owns(a)), "")


def _redundant_experts_canonical(spec: DeepSeekServingSpec) -> bool:
    return all(canonical_redundant_experts_arg(a) for a in spec.engine.extra_args)


def _first_redundant_experts_arg(spec: DeepSeekServingSpec) -> str:
    return next((a for a in spec.engine.extra_args if not canonical_redundant_experts_arg(a)), "")


def _no_model_config_keys(spec: DeepSeekServingSpec) -> bool:
    return not any(mentions_model_config_key(a) for a in spec.engine.extra_args)


def _first_model_config_key(spec: DeepSeekServingSpec) -> str:
    return next((a for a in spec.engine.extra_args if mentions_model_config_key(a)), "")


_CROSS_FIELD_RULES: tuple[SpecRule, ...] = (
    SpecRule(
        name="KnownMoEBackend",
        scope="spec",
        field_path=".moeBackend",
        cel=f"!has(self.moeBackend) || {NORMALIZED_BACKEND_CEL} in {cel_list(MOE_BACKENDS)}",
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
            f"!has(self.moeBackend) || !({NORMALIZED_BACKEND_CEL} in {cel_list(MEGA_MOE_BACKENDS)})"
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
            f"!has(self.moeBackend) || !({NORMALIZED_BACKEND_CEL} in "
            f"{cel_list(EPLB_REFUSED_BACKENDS)}) || !has(self.parallelism)"
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
            f"!({CEL_FLAG_KEY} in {cel_set(OWNED_FLAGS)}) && "
            "!(a.startsWith('-') && !a.startsWith('--') && size(a) >= 2 && "
            f"a.substring(0, 2) in {cel_set(OWNED_FLAGS)}) && "
            f"!(a.startsWith('-') && !({CEL_FLAG_KEY} in {cel_set(UNOWNED_PREFIX_FLAGS)}) && "
            f"{cel_list(ABBREVIABLE_FLAGS)}.exists(f, f.startsWith({CEL_FLAG_KEY}))) && "
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
            + " && ".join(f"!a.contains('{key}')" for key in MODEL_CONFIG_KEY_NAMES)
            + ")"
        ),
        message=(
            "spec.engine.extraArgs must not override a model config key the decision reads, in "
            "any form (a --hf-overrides JSON key at any depth, the dotted --hf-overrides.KEY "
            "form); set the typed field instead: "
            + "; ".join(f"{', '.join(keys)}: {field}" for field, keys in keys_by_field().items())
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
        or owns(arg)
        or mentions_model_config_key(arg)
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

SPEC_RULES = (
    _CROSS_FIELD_RULES
    + _EXTRA_ARGS_RULES
    + _VLLM_ARGV_RULES
    + BOUND_RULES
    + DASH_RULES
    + (MODEL_NAME_RULE,)
    + DISAGGREGATION_RULES
    + AGGREGATED_ONLY_RULES
)
"""Every static rule, in the order they are checked."""


def rules_for_scope(scope: str) -> list[SpecRule]:
    """The rules whose CEL expression runs on the schema node at ``scope``."""
    return [r for r in SPEC_RULES if r.scope == scope]


def check_spec(spec: DeepSeekServingSpec) -> DeepSeekServingSpec:
    """Run every static rule on ``spec`` in order; raise :class:`SpecError` for the first broken."""
    for rule in SPEC_RULES:
        if not rule.holds(spec):
            raise SpecError(rule.refusal_path(spec), rule.value(spec), rule.message)
    return spec
