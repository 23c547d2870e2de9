"""Admit a DeepSeekServing offline exactly as the API server does, from the generated CRD itself.

``render`` must refuse what ``kubectl apply`` refuses and accept what it accepts, so instead of a
second hand-written copy of the rules this module runs the generated CRD's own structural schema
(:func:`deepseek_operator.api.crd.build_crd`) the way kube-apiserver's apiextensions code does:

1. ``metadata``: ``name`` a DNS-1123 subdomain, ``namespace`` a DNS-1123 label, known fields
   only, labels and annotations with string values;
2. no unknown field anywhere the schema does not preserve unknown fields (``kubectl`` sends
   ``fieldValidation=Strict``);
3. ``null`` in an object field is dropped (the CRD declares nothing ``nullable``), then the
   schema's ``default`` values are filled in;
4. strict types (``"4"`` is no integer, ``"true"`` no boolean; a float with an integral value is
   the integer ``kubectl`` turns it into), ``minimum``/``maximum``, lengths, item counts, enums;
5. list-map uniqueness (``x-kubernetes-list-type: map``: no two items with the same keys);
6. every ``x-kubernetes-validations`` CEL rule, evaluated by the ``cel`` package
   (common-expression-language) with cel-go's extension libraries and Kubernetes' quantity
   library, as Kubernetes loads them, on the defaulted object.

The result is the defaulted object; the first problem raises a
:class:`~deepseek_operator.errors.SpecError` naming the field, the value and the rule.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any

import cel
from cel.stdlib import add_stdlib_to_context

from deepseek_operator.errors import SpecError

_DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
# ObjectMeta's fields; anything else under metadata is an unknown field to a strict request.
_METADATA_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)
_ROOT_FIELDS = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
_ANNOTATIONS_MAX_BYTES = 256 * 1024


def _refuse(path: str, value: Any, message: str) -> SpecError:
    return SpecError(path, value, message)


# --- metadata --------------------------------------------------------------------------------


def _check_qualified_key(path: str, key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if (
        (prefix and (len(prefix) > 253 or not _DNS_1123_SUBDOMAIN.match(prefix)))
        or not name
        or len(name) > 63
        or not _QUALIFIED_NAME.match(name)
    ):
        raise _refuse(
            path,
            key,
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character (at most 63 characters), with an optional "
            "DNS subdomain prefix and '/'",
        )


def _check_metadata(meta: Any) -> None:
    if not isinstance(meta, dict):
        raise _refuse("metadata", meta, "must be of type object")
    for key in meta:
        if key not in _METADATA_FIELDS:
            raise _refuse(f"metadata.{key}", None, "unknown field (not in ObjectMeta)")
    name = meta.get("name")
    if name is None:
        raise _refuse("metadata.name", None, "Required value: name or generateName is required")
    if not isinstance(name, str):
        raise _refuse("metadata.name", name, "must be of type string")
    if len(name) > 253 or not _DNS_1123_SUBDOMAIN.match(name):
        raise _refuse(
            "metadata.name",
            name,
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
            "'-' or '.', and must start and end with an alphanumeric character",
        )
    namespace = meta.get("namespace")
    if namespace is not None and (
        not isinstance(namespace, str)
        or len(namespace) > 63
        or not _DNS_1123_LABEL.match(namespace)
    ):
        raise _refuse("metadata.namespace", namespace, "must be a DNS-1123 label")
    labels = meta.get("labels")
    if labels is not None:
        if not isinstance(labels, dict):
            raise _refuse("metadata.labels", labels, "must be of type object")
        for key, raw in labels.items():
            _check_qualified_key("metadata.labels", key)
            value = "" if raw is None else raw  # Go decodes null into a map[string]string as ""
            if not isinstance(value, str):
                raise _refuse(f"metadata.labels.{key}", value, "must be of type string")
            if len(value) > 63 or not _LABEL_VALUE.match(value):
                raise _refuse(
                    "metadata.labels",
                    value,
                    "a valid label must be an empty string or consist of alphanumeric characters, "
                    "'-', '_' or '.', and must start and end with an alphanumeric character (at "
                    "most 63 characters)",
                )
    annotations = meta.get("annotations")
    if annotations is not None:
        if not isinstance(annotations, dict):
            raise _refuse("metadata.annotations", annotations, "must be of type object")
        size = 0
        for key, raw in annotations.items():
            _check_qualified_key("metadata.annotations", key)
            value = "" if raw is None else raw  # Go decodes null into a map[string]string as ""
            if not isinstance(value, str):
                raise _refuse(f"metadata.annotations.{key}", value, "must be of type string")
            size += len(key.encode()) + len(value.encode())
        if size > _ANNOTATIONS_MAX_BYTES:
            raise _refuse(
                "metadata.annotations",
                size,
                f"Too long: must have at most {_ANNOTATIONS_MAX_BYTES} bytes",
            )


# --- structural schema -----------------------------------------------------------------------


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _as_integer(value: Any) -> Any:
    """``kubectl`` sends an integral float (``4.0``) as ``4``; anything else is left alone."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _type_error(path: str, value: Any, expected: str) -> SpecError:
    return _refuse(path, value, f'{path} in body must be of type {expected}: "{_type_name(value)}"')


def _check_scalar(path: str, value: Any, schema: dict[str, Any]) -> Any:
    kind = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        value = _as_integer(value)
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise _type_error(path, value, "integer or string")
        return value
    if kind == "integer":
        value = _as_integer(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise _type_error(path, value, "integer")
    elif kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _type_error(path, value, "number")
    elif kind == "string":
        if not isinstance(value, str):
            raise _type_error(path, value, "string")
    elif kind == "boolean" and not isinstance(value, bool):
        raise _type_error(path, value, "boolean")
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(f'"{v}"' for v in schema["enum"])
        raise _refuse(path, value, f"Unsupported value: supported values: {supported}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema:
            low = schema["minimum"]
            if value < low or (schema.get("exclusiveMinimum") and value == low):
                op = (
                    "greater than" if schema.get("exclusiveMinimum") else "greater than or equal to"
                )
                raise _refuse(path, value, f"{path} in body should be {op} {low}")
        if "maximum" in schema:
            high = schema["maximum"]
            if value > high or (schema.get("exclusiveMaximum") and value == high):
                op = "less than" if schema.get("exclusiveMaximum") else "less than or equal to"
                raise _refuse(path, value, f"{path} in body should be {op} {high}")
    if isinstance(value, str):
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            raise _refuse(path, value, f"{path} in body should match '{schema['pattern']}'")
        length = len(value)
        if "maxLength" in schema and length > schema["maxLength"]:
            raise _refuse(
                path, value, f"Too long: may not be more than {schema['maxLength']} characters"
            )
        if "minLength" in schema and length < schema["minLength"]:
            raise _refuse(
                path, value, f"{path} in body should be at least {schema['minLength']} chars long"
            )
    return value


def _walk(path: str, value: Any, schema: dict[str, Any]) -> Any:
    """Type-check, bound and default ``value`` against ``schema``; return the defaulted value."""
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            raise _type_error(path, value, "object")
        return _walk_object(path, value, schema)
    if kind == "array":
        if not isinstance(value, list):
            raise _type_error(path, value, "array")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise _refuse(
                path, len(value), f"Too many: must have at most {schema['maxItems']} items"
            )
        items = schema.get("items", {})
        out = [_walk(f"{path}[{i}]", item, items) for i, item in enumerate(value)]
        if schema.get("x-kubernetes-list-type") == "map":
            _check_unique_keys(path, out, schema.get("x-kubernetes-list-map-keys", []))
        _run_rules(path, out, schema)
        return out
    if not kind and not schema.get("x-kubernetes-int-or-string"):
        return value  # untyped, preserved as is
    value = _check_scalar(path, value, schema)
    _run_rules(path, value, schema)
    return value


def _check_unique_keys(path: str, items: list[Any], keys: list[str]) -> None:
    """A list-map holds one item per key tuple (server-side apply could not merge it otherwise)."""
    seen: set[str] = set()
    for i, item in enumerate(items):
        key = {k: item.get(k) for k in keys} if isinstance(item, dict) else {}
        text = json.dumps(key, sort_keys=True)
        if text in seen:
            raise _refuse(f"{path}[{i}]", key, "Duplicate value")
        seen.add(text)


def _walk_object(path: str, value: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    properties: dict[str, Any] = schema.get("properties", {})
    additional = schema.get("additionalProperties")
    preserve = schema.get("x-kubernetes-preserve-unknown-fields", False)
    if not properties and additional is None and preserve:
        # A free-form object: kept verbatim, nulls included.
        out = value
    else:
        # Strict decoding refuses an unknown field even when its value is null; the nulls of
        # known fields are then pruned before defaulting (nothing in this CRD is nullable).
        for key in value:
            if key not in properties and additional is None and not preserve:
                raise _refuse(
                    f"{path}.{key}", None, "unknown field (not in the DeepSeekServing schema)"
                )
        out = {k: v for k, v in value.items() if v is not None}
        for key, sub in properties.items():
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
        for key in schema.get("required", []):
            if key not in out:
                raise _refuse(f"{path}.{key}", None, "Required value")
        if "maxProperties" in schema and len(out) > schema["maxProperties"]:
            raise _refuse(
                path, len(out), f"Too many: must have at most {schema['maxProperties']} items"
            )
        for key in list(out):
            if key in properties:
                out[key] = _walk(f"{path}.{key}", out[key], properties[key])
            elif isinstance(additional, dict):
                out[key] = _walk(f"{path}.{key}", out[key], additional)
    _run_rules(path, out, schema)
    return out


# --- CEL -------------------------------------------------------------------------------------


@functools.cache
def _program(rule: str) -> Any:
    return cel.compile(rule)


# Kubernetes' resource.Quantity grammar (ParseQuantity), sign included; the exponent of a
# decimal-exponent suffix is an integer.
_QUANTITY = re.compile(
    r"^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)
_SUFFIX_FACTOR = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    **{s: Decimal(1024**i) for i, s in enumerate(["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"], start=1)},
}


def _quantity_value(text: Any) -> Decimal:
    """The number a Kubernetes quantity string stands for (the CEL quantity library's value)."""
    match = _QUANTITY.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"quantities must match the quantity grammar: {text!r}")
    sign, number, suffix = match.group(1), match.group(2), match.group(3) or ""
    try:
        if suffix[:1] in ("e", "E"):
            value = Decimal(number) * Decimal(10) ** int(suffix[1:])
        else:
            value = Decimal(number) * _SUFFIX_FACTOR[suffix]
    except (InvalidOperation, OverflowError) as exc:
        raise ValueError(f"quantity out of range: {text!r}") from exc
    return -value if sign == "-" else value


def _is_quantity(text: Any) -> bool:
    try:
        _quantity_value(text)
    except ValueError:
        return False
    return True


def _compare_quantities(left: Any, right: Any) -> int:
    a, b = _quantity_value(left), _quantity_value(right)
    return (a > b) - (a < b)


def _context(value: Any) -> Any:
    # The Kubernetes CEL libraries the rules use (strings: lowerAscii, replace, split, join)
    # are cel-go's extension libraries, which cel.stdlib mirrors. Kubernetes' quantity library
    # is registered here: a quantity stays its string, its methods parse it (a method call
    # x.f(y) reaches the function f as f(x, y)).
    context = cel.Context()
    add_stdlib_to_context(context, ["strings", "lists", "sets", "math"])
    context.add_function("isQuantity", _is_quantity)
    context.add_function(
        "quantity", lambda text: text if _is_quantity(text) else _quantity_value(text)
    )
    context.add_function("compareTo", _compare_quantities)
    context.add_function("isInteger", lambda text: _quantity_value(text) % 1 == 0)
    context.add_function("isGreaterThan", lambda left, right: _compare_quantities(left, right) > 0)
    context.add_function("isLessThan", lambda left, right: _compare_quantities(left, right) < 0)
    context.add_function("asApproximateFloat", lambda text: float(_quantity_value(text)))
    context.add_function(
        "sub",
        lambda left, right: format(
            _quantity_value(left)
            - (Decimal(right) if isinstance(right, int) else _quantity_value(right)),
            "f",
        ),
    )
    context.add_function(
        "sign", lambda text: (_quantity_value(text) > 0) - (_quantity_value(text) < 0)
    )
    context.add_variable("self", value)
    return context


# (rule, fieldPath, message) of each rule on one schema node.
_Rules = tuple[tuple[str, str, str], ...]
# Where a value fails its rules: (field path, the offending value, the message).
_Failure = tuple[str, Any, str]


def _run_rules(path: str, value: Any, schema: dict[str, Any]) -> None:
    rules: _Rules = tuple(
        (r["rule"], r.get("fieldPath", ""), r["message"])
        for r in schema.get("x-kubernetes-validations", ())
    )
    if not rules:
        return
    try:
        text = json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):  # not JSON (a caller's odd value): evaluate it afresh
        failure = _first_failure(path, value, rules)
    else:
        failure = _remembered_failure(path, rules, text)
    if failure is not None:
        raise _refuse(*failure)


@functools.lru_cache(maxsize=4096)
def _remembered_failure(path: str, rules: _Rules, value_json: str) -> _Failure | None:
    """:func:`_first_failure` of a JSON value, remembered: the operator parses an object again
    on every new generation and most of its parts (the model, parallelism, …) are unchanged,
    and evaluating the CEL rules is most of a parse."""
    return _first_failure(path, json.loads(value_json), rules)


def _first_failure(path: str, value: Any, rules: _Rules) -> _Failure | None:
    """The first of ``rules`` that ``value`` (at ``path``) fails, or None."""
    context = _context(value)
    for rule, field_path, message in rules:
        try:
            result = _program(rule).execute(context)
        except (ArithmeticError, ValueError, TypeError, RuntimeError) as exc:
            # The API server reports a rule that cannot be evaluated as a refusal too.
            return (path or "(root)", None, f"rule {rule!r}: {exc}")
        if result is not True:
            return ((path + field_path).lstrip("."), _lookup(value, field_path), message)
    return None


def _lookup(value: Any, field_path: str) -> Any:
    for part in [p for p in field_path.split(".") if p]:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


# --- entry point -----------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _root_schema() -> dict[str, Any]:
    from deepseek_operator.api.crd import build_crd

    schema: dict[str, Any] = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def admit(obj: Any) -> dict[str, Any]:
    """``obj`` as the API server would store it (defaults filled in), or a SpecError.

    ``status`` is ignored as on create (the status subresource owns it); ``apiVersion`` and
    ``kind`` are checked by the caller.
    """
    if not isinstance(obj, dict):
        raise _refuse("(document)", _type_name(obj), "must be a DeepSeekServing object")
    for key in obj:
        if key not in _ROOT_FIELDS:
            raise _refuse(key, None, "unknown field (not in the DeepSeekServing schema)")
    _check_metadata(obj.get("metadata"))
    schema = _root_schema()
    body = {k: v for k, v in obj.items() if k not in ("status", "metadata") and v is not None}
    if "spec" not in body:
        raise _refuse("spec", None, "Required value")
    spec = _walk("spec", body["spec"], schema["properties"]["spec"])
    meta = obj["metadata"]
    # The root rules see metadata.name and generateName only, as in the API server.
    root = {
        "metadata": {k: meta[k] for k in ("name", "generateName") if k in meta},
        "spec": spec,
    }
    try:
        _run_rules(
            "", root, {"x-kubernetes-validations": schema.get("x-kubernetes-validations", [])}
        )
    except SpecError as exc:
        # The root's only rule is about metadata.name (a CRD rule cannot name it in fieldPath).
        raise _refuse("metadata.name", meta.get("name"), exc.message) from None
    admitted = dict(obj)
    admitted["spec"] = spec
    return admitted
