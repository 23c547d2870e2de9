"""The structural-schema half of offline admission: type-check, bound and default a value.

:func:`walk` goes down the generated CRD's ``openAPIV3Schema`` the way kube-apiserver's
apiextensions code does: unknown fields refused where the schema does not preserve them, ``null``
in an object field dropped and ``default`` values filled in, strict scalar types (an integral
float is the integer ``kubectl`` sends), bounds, lengths, patterns, item counts and enums,
list-map key uniqueness, and each node's CEL rules (:mod:`.admission_cel`) on the defaulted value.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from deepseek_operator.api.admission_cel import run_rules
from deepseek_operator.errors import SpecError


def type_name(value: Any) -> str:
    """The JSON-schema type name of ``value`` (as the API server's messages name it)."""
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
    return SpecError(
        path, value, f'{path} in body must be of type {expected}: "{type_name(value)}"'
    )


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
        raise SpecError(path, value, f"Unsupported value: supported values: {supported}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema:
            low = schema["minimum"]
            if value < low or (schema.get("exclusiveMinimum") and value == low):
                op = (
                    "greater than" if schema.get("exclusiveMinimum") else "greater than or equal to"
                )
                raise SpecError(path, value, f"{path} in body should be {op} {low}")
        if "maximum" in schema:
            high = schema["maximum"]
            if value > high or (schema.get("exclusiveMaximum") and value == high):
                op = "less than" if schema.get("exclusiveMaximum") else "less than or equal to"
                raise SpecError(path, value, f"{path} in body should be {op} {high}")
    if isinstance(value, str):
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            raise SpecError(path, value, f"{path} in body should match '{schema['pattern']}'")
        length = len(value)
        if "maxLength" in schema and length > schema["maxLength"]:
            raise SpecError(
                path, value, f"Too long: may not be more than {schema['maxLength']} characters"
            )
        if "minLength" in schema and length < schema["minLength"]:
            raise SpecError(
                path, value, f"{path} in body should be at least {schema['minLength']} chars long"
            )
    return value


def walk(path: str, value: Any, schema: dict[str, Any]) -> Any:
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
            raise SpecError(
                path, len(value), f"Too many: must have at most {schema['maxItems']} items"
            )
        items = schema.get("items", {})
        out = [walk(f"{path}[{i}]", item, items) for i, item in enumerate(value)]
        if schema.get("x-kubernetes-list-type") == "map":
            _check_unique_keys(path, out, schema.get("x-kubernetes-list-map-keys", []))
        run_rules(path, out, schema)
        return out
    if not kind and not schema.get("x-kubernetes-int-or-string"):
        return value  # untyped, preserved as is
    value = _check_scalar(path, value, schema)
    run_rules(path, value, schema)
    return value


def _check_unique_keys(path: str, items: list[Any], keys: list[str]) -> None:
    """A list-map holds one item per key tuple (server-side apply could not merge it otherwise)."""
    seen: set[str] = set()
    for i, item in enumerate(items):
        key = {k: item.get(k) for k in keys} if isinstance(item, dict) else {}
        text = json.dumps(key, sort_keys=True)
        if text in seen:
            raise SpecError(f"{path}[{i}]", key, "Duplicate value")
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
        # known fields are then dropped before defaulting: the API server prunes a
        # non-nullable null, and keeps a nullable one (an optional field without a default)
        # that its CEL reads as absent, which is "unset" either way.
        for key in value:
            if key not in properties and additional is None and not preserve:
                raise SpecError(
                    f"{path}.{key}", None, "unknown field (not in the DeepSeekServing schema)"
                )
        out = {k: v for k, v in value.items() if v is not None}
        for key, sub in properties.items():
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
        for key in schema.get("required", []):
            if key not in out:
                raise SpecError(f"{path}.{key}", None, "Required value")
        if "maxProperties" in schema and len(out) > schema["maxProperties"]:
            raise SpecError(
                path, len(out), f"Too many: must have at most {schema['maxProperties']} items"
            )
        for key in list(out):
            if key in properties:
                out[key] = walk(f"{path}.{key}", out[key], properties[key])
            elif isinstance(additional, dict):
                out[key] = walk(f"{path}.{key}", out[key], additional)
    run_rules(path, out, schema)
    return out
