"""The static rules on single values: bounds on sizes, flag-like strings, model and object names.

Each is a :class:`~.rule.SpecRule` (CEL in the CRD, Python in the loader) like the cross-field
rules of :mod:`.cross_field`; :data:`.check.SPEC_RULES` lists them all. ``metadata.name``'s rule
is a :class:`~.rule.NameRule` on the CRD's root.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from deepseek_operator.api.extra_args import parser
from deepseek_operator.api.limits import MAX_GPUS_PER_REPLICA, MAX_NAME_LENGTH, MAX_PODS_PER_SERVING
from deepseek_operator.api.rules.rule import NameRule, SpecRule
from deepseek_operator.names import RESERVED_NAME_ENDINGS

if TYPE_CHECKING:
    from deepseek_operator.api.spec import DeepSeekServingSpec

# spec.model.name is the positional model of `vllm serve`: a Hugging Face repo id (huggingface_hub's
# validate_repo_id: [owner/]name of letters, digits, '_', '-', '.', each part starting and ending
# with a letter, digit or '_', no '--' or '..', the name at most 96 characters) or an absolute path.
HF_REPO_ID = r"^([A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?/)?[A-Za-z0-9_]([A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?$"


def _model_name_ok(spec: DeepSeekServingSpec) -> bool:
    name = spec.model.name
    if name.startswith("/"):
        return re.search(parser.CONTROL, name) is None
    return re.match(HF_REPO_ID, name) is not None and "--" not in name and ".." not in name


MODEL_NAME_RULE = SpecRule(
    name="ModelNameIsARepoIdOrPath",
    scope="spec.model",
    field_path=".name",
    cel=(
        "!has(self.name) || (self.name.startsWith('/') ? "
        f"!self.name.matches(r'{parser.CONTROL}') : "
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


NAME_RULE = NameRule(
    cel=(
        f"size(self.metadata.name) <= {MAX_NAME_LENGTH} && "
        "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')"
    ),
    message=(
        "metadata.name must be a DNS-1035 label (lower-case letters, digits and '-', starting "
        f"with a letter and ending with a letter or digit) of at most {MAX_NAME_LENGTH} "
        "characters: the operator names Services after it"
    ),
)


def _endings(words: tuple[str, ...]) -> str:
    quoted = [f"'{w}'" for w in words]
    return ", ".join(quoted[:-1]) + f" or {quoted[-1]}" if len(quoted) > 1 else quoted[0]


NAME_ENDING_RULE = NameRule(
    cel=" && ".join(f"!self.metadata.name.endsWith('{e}')" for e in RESERVED_NAME_ENDINGS),
    message=(
        f"metadata.name must not end in {_endings(RESERVED_NAME_ENDINGS)}: the operator names "
        "a serving's children <name>, <name>-api, <name>-prefill, <name>-decode and so on, so "
        "a serving named x-prefill would take the names of the prefill pool of a serving "
        "named x (and x-api those of its Service)"
    ),
    create_only=True,
)

NAME_RULES: tuple[NameRule, ...] = (NAME_RULE, NAME_ENDING_RULE)
"""The rules on ``metadata.name``, in the order the API server reports them."""
