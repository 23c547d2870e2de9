"""Every static spec rule in one ordered table, run on the spec and on each role of it.

:data:`SPEC_RULES` is the order the rules are checked in (:func:`check_spec`, run by the loader;
the first broken rule is the refusal) and the order their CEL appears in the CRD
(:func:`rules_for_scope`, read by api/crd.py).

A role shares the aggregated spec's moeBackend, parallelism and extraArgs fields, so the rules
on them hold for each role too: api/crd.py attaches their CEL to the role's schema nodes, and
:func:`check_roles` runs their predicates on each role's projected spec, naming the role's field
(``spec.disaggregation.roles[1].parallelism.dataParallelSizeLocal``) with the rule's own message.
"""

from __future__ import annotations

from deepseek_operator.api.rules.cross_field import CROSS_FIELD_RULES
from deepseek_operator.api.rules.disaggregation import AGGREGATED_ONLY_RULES, DISAGGREGATION_RULES
from deepseek_operator.api.rules.extra_args import EXTRA_ARGS_RULES
from deepseek_operator.api.rules.rule import SpecRule
from deepseek_operator.api.rules.values import BOUND_RULES, DASH_RULES, MODEL_NAME_RULE
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.errors import SpecError

SPEC_RULES = (
    CROSS_FIELD_RULES
    + EXTRA_ARGS_RULES
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


# The rules of the aggregated spec that also hold for each role, by the role's schema node they
# run on (api/crd.py attaches their CEL there; check_roles runs them on each role's projection).
ROLE_RULES: dict[str, tuple[str, ...]] = {
    "role": (
        "KnownMoEBackend",
        "MegaMoERequiresExpertParallel",
        "FlashInferMoEEPRejectsEPLB",
        "PodsPerServingBounded",
    ),
    "parallelism": tuple(r.name for r in SPEC_RULES if r.scope == "spec.parallelism"),
    "engine": (
        "ExtraArgsDoNotOverrideTypedFields",
        "ExtraArgsDoNotOverrideModelConfig",
        "ExtraArgsRedundantExpertsSpelling",
        "ExtraArgsValuesFollowAnOption",
    ),
    "extraArgs": ("ExtraArgsAreVLLMOptions",),
}


def check_roles(spec: DeepSeekServingSpec) -> DeepSeekServingSpec:
    """Run the rules of :data:`ROLE_RULES` on each role; raise SpecError for the first broken."""
    if spec.disaggregation is None:
        return spec
    names = {name for group in ROLE_RULES.values() for name in group}
    rules = [r for r in SPEC_RULES if r.name in names]
    for index, role in enumerate(spec.disaggregation.roles):
        # The role's own extraArgs only: the shared ones were checked at spec.engine.
        projected = spec.for_role(role.role)
        projected = projected.model_copy(
            update={
                "engine": projected.engine.model_copy(
                    update={"extra_args": list(role.engine.extra_args)}
                )
            }
        )
        for rule in rules:
            if not rule.holds(projected):
                path = rule.refusal_path(projected).removeprefix("spec.")
                raise SpecError(
                    f"spec.disaggregation.roles[{index}].{path}",
                    rule.value(projected),
                    rule.message,
                )
    return spec
