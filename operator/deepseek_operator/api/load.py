"""Turn a DeepSeekServing object (a dict from YAML or the API server) into a validated spec.

Every failure becomes a :class:`~deepseek_operator.errors.SpecError` naming the field path
(camelCase, from the object root), the value and the rule, in the API server's wording.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from deepseek_operator.api.admission import admit
from deepseek_operator.api.rules.check import check_roles, check_spec
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.errors import SpecError
from deepseek_operator.names import API_VERSION, KIND, role_object_name


@dataclass(frozen=True)
class ServingObject:
    """A DeepSeekServing's identity plus its validated spec."""

    name: str
    namespace: str
    spec: DeepSeekServingSpec
    generation: int = 1
    uid: str = ""
    # One role of a disaggregated serving (for_role): the role, and the serving it belongs to.
    role: str = ""
    serving: str = ""

    @property
    def serving_name(self) -> str:
        """The DeepSeekServing's own name (a role's object is named ``<serving>-<role>``)."""
        return self.serving or self.name

    def for_role(self, kind: str) -> ServingObject:
        """The object one role renders: named ``<name>-<role>``, the role's projected spec."""
        return replace(
            self,
            name=role_object_name(self.name, kind),
            spec=self.spec.for_role(kind),
            role=kind,
            serving=self.name,
        )


def _path(loc: tuple[int | str, ...]) -> str:
    out = "spec"
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _lookup(data: Any, loc: tuple[int | str, ...]) -> Any:
    for part in loc:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


_PYDANTIC_WORDING = {
    "extra_forbidden": "unknown field (not in the DeepSeekServing schema)",
    "missing": "Required value",
}


def parse_spec(raw: Any) -> DeepSeekServingSpec:
    """Validate a raw ``spec`` mapping, then run the static rules on it; raise SpecError for
    the first problem found."""
    # The types hold; now the static rules, the same table the CRD's CEL is rendered from.
    return check_roles(check_spec(parse_spec_types(raw)))


def parse_spec_types(raw: Any) -> DeepSeekServingSpec:
    """Validate a raw ``spec`` mapping against the types and bounds only, without the static
    rules (the conformance harness renders specs we refuse, to compare with vLLM's refusal)."""
    if not isinstance(raw, dict):
        raise SpecError("spec", raw, "must be an object")
    try:
        spec = DeepSeekServingSpec.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        ctx_error = (first.get("ctx") or {}).get("error")
        if isinstance(ctx_error, SpecError):
            raise ctx_error from None
        loc = tuple(first["loc"])
        message = _PYDANTIC_WORDING.get(
            first["type"], first["msg"].replace("Input should be", "must be")
        )
        if first["type"] == "missing":
            raise SpecError(_path(loc), None, message) from None
        raise SpecError(_path(loc), _lookup(raw, loc), message) from None
    return spec


def parse_serving(obj: Any) -> ServingObject:
    """Validate a whole DeepSeekServing object (apiVersion, kind, metadata, spec)."""
    if not isinstance(obj, dict):
        raise SpecError("(document)", type(obj).__name__, "must be a DeepSeekServing object")
    if obj.get("kind") != KIND:
        raise SpecError("kind", obj.get("kind"), f"must be {KIND}")
    if obj.get("apiVersion") != API_VERSION:
        raise SpecError("apiVersion", obj.get("apiVersion"), f"must be {API_VERSION}")
    admitted = admit(obj)
    meta = admitted["metadata"]
    name = meta["name"]
    spec = parse_spec(admitted["spec"])
    return ServingObject(
        name=name,
        namespace=str(meta.get("namespace") or "default"),
        spec=spec,
        generation=int(meta.get("generation") or 1),
        uid=str(meta.get("uid") or ""),
    )
