"""The extraArgs rules: no flag the operator owns, EPLB's one spelling, only vLLM's own options.

``spec.engine.extraArgs`` is read as vLLM's parser reads it (:mod:`deepseek_operator.api.extra_args`);
each rule here is a :class:`~.rule.SpecRule` (CEL in the CRD, the same predicate in the loader,
one message). An option no supported release has, in any spelling, would crash-loop the pod
("unrecognized arguments"); a flag the operator renders from a typed field, set again here, would
silently undo the decision.
"""

from __future__ import annotations

from deepseek_operator.api.extra_args import parser
from deepseek_operator.api.extra_args.eplb import (
    DOTTED_FORM,
    JSON_FORM,
    MAX_REDUNDANT_EXPERTS,
    REDUNDANT_MARK,
    canonical_redundant_experts_arg,
)
from deepseek_operator.api.extra_args.owned_flags import (
    ABBREVIABLE_FLAGS,
    CEL_FLAG_KEY,
    MODEL_CONFIG_KEY_NAMES,
    OWNED_FLAGS,
    UNOWNED_PREFIX_FLAGS,
    keys_by_field,
    mentions_model_config_key,
    owns,
)
from deepseek_operator.api.rules.rule import SpecRule, cel_list, cel_set
from deepseek_operator.api.spec import DeepSeekServingSpec


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


_EXTRA_ARGS_RULES: tuple[SpecRule, ...] = (
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
        parser.option_ok(arg)
        or owns(arg)
        or mentions_model_config_key(arg)
        or not canonical_redundant_experts_arg(arg)
    )


def _first_bad_option(spec: DeepSeekServingSpec) -> int:
    return next(i for i, a in enumerate(spec.engine.extra_args) if not _option_ok(a))


def _first_bad_value(spec: DeepSeekServingSpec) -> int:
    index = parser.first_bad_value(list(spec.engine.extra_args))
    return -1 if index is None else index


# extraArgs read as vLLM's parser reads them (api/extra_args/parser.py): an option no supported release
# has, in any spelling, crash-loops the pod ("unrecognized arguments").
_VLLM_ARGV_RULES: tuple[SpecRule, ...] = (
    SpecRule(
        name="ExtraArgsAreVLLMOptions",
        scope="spec.engine.extraArgs",
        field_path="",
        # An item an earlier extraArgs rule refuses gets that rule's more specific message.
        cel=(
            f"{parser.OPTION_CEL} || [self].exists(a, "
            + " || ".join(
                f"!({_item_cel(r)})" for r in _EXTRA_ARGS_RULES if r.name in _EARLIER_ARG_RULES
            )
            + ")"
        ),
        message=parser.TEXTS.option,
        holds=lambda s: all(_option_ok(a) for a in s.engine.extra_args),
        value=lambda s: s.engine.extra_args[_first_bad_option(s)],
        per_item=True,
        path_of=lambda s: f"spec.engine.extraArgs[{_first_bad_option(s)}]",
    ),
    SpecRule(
        name="ExtraArgsValuesFollowAnOption",
        scope="spec.engine",
        field_path=".extraArgs",
        cel=parser.VALUES_CEL,
        message=parser.VALUES_MESSAGE,
        holds=lambda s: parser.first_bad_value(list(s.engine.extra_args)) is None,
        value=lambda s: s.engine.extra_args[_first_bad_value(s)],
    ),
)

EXTRA_ARGS_RULES = _EXTRA_ARGS_RULES + _VLLM_ARGV_RULES
"""The extraArgs rules, in the order they are checked."""
