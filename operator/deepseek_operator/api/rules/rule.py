"""The shape of a static spec rule: one CEL expression and one Python predicate, one message.

A :class:`SpecRule` is rendered into the CRD as an ``x-kubernetes-validations`` entry (so the API
server rejects the CR) and run by the loader on a parsed spec (so the offline ``render`` rejects
the same CR), with ONE message, so both say the same words. The CEL helpers here build the
literals the rule tables share, and the GPU-resource test two of them make (CEL and Python).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deepseek_operator.api.spec import DeepSeekServingSpec


def cel_list(values: tuple[str, ...] | frozenset[str]) -> str:
    """A CEL list literal of ``values`` (a frozenset sorted, a tuple in its order)."""
    ordered = sorted(values) if isinstance(values, frozenset) else list(values)
    return "[" + ", ".join(f"'{v}'" for v in ordered) + "]"


def cel_set(values: tuple[str, ...]) -> str:
    """A CEL map literal used as a set: ``x in {...}`` costs O(1), a list costs O(n)."""
    return "{" + ", ".join(f"'{v}': true" for v in values) + "}"


# spec.moeBackend in CEL, normalised as vLLM does (lower case, '-' for '_').
NORMALIZED_BACKEND_CEL = "self.moeBackend.lowerAscii().replace('-', '_')"


def cel_or_default(ref: str, default: str) -> str:
    """CEL: the optional field ``ref`` where set, else ``default`` (a CEL literal)."""
    return f"(has({ref}) ? {ref} : {default})"


# spec.gpuResourceName in CEL, at the spec's default where unset.
GPU_RESOURCE_CEL = cel_or_default("self.gpuResourceName", "'nvidia.com/gpu'")


def cel_no_gpu_resource(resources: str) -> str:
    """CEL: neither the limits nor the requests of the ResourceRequirements at ``resources``
    (``self.resources``, a role's ``r.resources``) name the GPU resource."""
    return (
        f"(!has({resources}.limits) || !({GPU_RESOURCE_CEL} in {resources}.limits)) && "
        f"(!has({resources}.requests) || !({GPU_RESOURCE_CEL} in {resources}.requests))"
    )


def sets_gpu_resource(spec: DeepSeekServingSpec, resources: Any) -> bool:
    """Whether ``resources`` (the spec's or a role's) name ``spec.gpuResourceName``: the same
    test as :func:`cel_no_gpu_resource`, negated, on a parsed spec."""
    gpu = spec.gpu_resource_name
    return gpu in resources.limits or gpu in resources.requests


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


@dataclass(frozen=True)
class NameRule:
    """A rule on ``metadata.name``: CEL on the CRD's root (run offline by api/admission.py)."""

    cel: str
    message: str
    # Checked when the object is created only (the name is immutable): the CRD rule is a
    # transition rule with optionalOldSelf that every update passes, so an object admitted
    # before the rule existed keeps being updated, its status written and reconciled.
    create_only: bool = False

    @property
    def crd_rule(self) -> str:
        """The CEL the CRD carries (a create-only rule passes when an old object exists)."""
        return f"oldSelf.hasValue() || ({self.cel})" if self.create_only else self.cel
