"""Generate the DeepSeekServing CRD from the pydantic models (``deepseek-operator crds``).

The output is a structural schema: every ``$ref`` inlined, no ``additionalProperties: false``,
no ``anyOf`` with ``null`` (an optional spec field without a default is ``nullable`` instead, so
``null`` is "unset" on every path), free-form objects marked ``x-kubernetes-preserve-unknown-fields``,
and the CEL rules of :mod:`deepseek_operator.api.rules` attached where they run.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml

from deepseek_operator.api.rules.check import ROLE_RULES, SPEC_RULES, rules_for_scope
from deepseek_operator.api.rules.values import NAME_RULES
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.api.status import DeepSeekServingStatus
from deepseek_operator.names import (
    CATEGORIES,
    CRD_NAME,
    GROUP,
    KIND,
    LABEL_NAME,
    PLURAL,
    PROJECT,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
)

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {
        "name": "Backend",
        "type": "string",
        "jsonPath": ".status.resolved.moeBackend",
        "description": "MoE backend rendered into --moe-backend",
    },
    {
        "name": "SP",
        "type": "boolean",
        "jsonPath": ".status.resolved.sequenceParallel",
        "description": "DeepSeek V4 sequence parallelism",
    },
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
        "description": "All replicas ready",
    },
    {
        "name": "Reason",
        "type": "string",
        "jsonPath": ".status.decision.reason",
        "description": "Why the backend was chosen",
    },
    {
        "name": "Requests",
        "type": "string",
        "jsonPath": ".status.capacity[0].concurrentRequests",
        "description": "Concurrent requests at maxModelLen one replica holds (first GPU type)",
    },
    {
        "name": "Router",
        "type": "integer",
        "jsonPath": ".status.router.readyReplicas",
        "description": "vLLM router pods ready (empty when no router runs)",
    },
    {
        "name": "Endpoint",
        "type": "string",
        "jsonPath": ".status.endpoint.url",
        "description": "The one OpenAI-compatible endpoint (the Service <name>-api)",
    },
    {
        "name": "Weights",
        "type": "string",
        "jsonPath": ".status.weights.progress",
        "description": "spec.modelCache.fill: the fill's progress (GiB and files done, ETA) or done",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    # A disaggregated serving's backends per role (kubectl get -o wide; empty when aggregated).
    *(
        {
            "name": f"{role.capitalize()}",
            "type": "string",
            "jsonPath": f'.status.roles[?(@.role=="{role}")].resolved.moeBackend',
            "description": f"MoE backend of the {role} role (disaggregated servings)",
            "priority": 1,
        }
        for role in ("prefill", "decode")
    ),
    *(
        {
            "name": f"{role.capitalize()}Requests",
            "type": "string",
            "jsonPath": f'.status.roles[?(@.role=="{role}")].capacity[0].concurrentRequests',
            "description": f"Concurrent requests at maxModelLen of one {role} replica",
            "priority": 1,
        }
        for role in ("prefill", "decode")
    ),
]

_DROP_KEYS = {"title", "$defs"}


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """Resolve ``$ref`` and turn pydantic's JSON schema into a structural OpenAPI v3 schema."""
    if isinstance(node, list):
        return [_inline(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = copy.deepcopy(defs[node["$ref"].split("/")[-1]])
        extra = {k: v for k, v in node.items() if k != "$ref"}
        target.update(extra)
        return _inline(target, defs)
    node = {k: v for k, v in node.items() if k not in _DROP_KEYS}
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        types = sorted(o.get("type", "") for o in options)
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if types == ["integer", "string"]:
            merged: dict[str, Any] = {"x-kubernetes-int-or-string": True}
        elif len(options) == 1:
            merged = dict(options[0])
        else:
            raise ValueError(f"cannot express anyOf {node['anyOf']} structurally")
        merged.update(rest)
        if merged.get("default", 0) is None:
            del merged["default"]
        return _inline(merged, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: _inline(sub, defs) for name, sub in value.items()}
        elif key == "additionalProperties":
            if value is False:
                continue
            if value is True or value == {}:
                out["x-kubernetes-preserve-unknown-fields"] = True
            else:
                out[key] = _inline(value, defs)
        else:
            out[key] = _inline(value, defs)
    # OpenAPI v3 as the API server reads it has no `const` and would drop it without a word.
    if "const" in out:
        out["enum"] = [out.pop("const")]
    # JSON Schema's numeric exclusive bounds are booleans beside minimum/maximum in OpenAPI v3.
    for bound, flag in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if flag in out and not isinstance(out[flag], bool):
            out[bound] = out[flag]
            out[flag] = True
    if (
        out.get("type") == "object"
        and "properties" not in out
        and "additionalProperties" not in out
    ):
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _schema_of(model: type[Any]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    schema: dict[str, Any] = _inline(raw, defs)
    return schema


def _nullable_optionals(node: Any) -> None:
    """Mark every optional field without a ``default`` ``nullable: true``, at every level.

    ``null`` then means "unset" to every client, as it does offline: ``kubectl create`` and
    client-side ``kubectl apply`` (whose decoder prunes a non-nullable null) and
    ``kubectl apply --server-side`` (whose merged object is validated as sent, so a
    non-nullable null there fails "must be of type object"). The API server's CEL treats a null
    nullable field as absent, so every rule's ``has()`` guard reads it as unset; fields with a
    default keep their default instead (a non-nullable null is defaulted on every path).
    """
    if isinstance(node, list):
        for item in node:
            _nullable_optionals(item)
        return
    if not isinstance(node, dict):
        return
    required = set(node.get("required", ()))
    for name, sub in (node.get("properties") or {}).items():
        if name not in required and isinstance(sub, dict) and "default" not in sub:
            sub["nullable"] = True
            if "enum" in sub:
                # The API server checks an enum even on a nullable null (and a null among the
                # values does not help), while a CEL rule never sees a null: the values move
                # into one.
                values = sub.pop("enum")
                sub.setdefault("x-kubernetes-validations", []).append(
                    {
                        "rule": f"self in {json.dumps(values)}",
                        "message": "supported values: " + ", ".join(json.dumps(v) for v in values),
                        "reason": "FieldValueInvalid",
                    }
                )
        _nullable_optionals(sub)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            _nullable_optionals(node[key])


def _strip_defaults(node: Any) -> Any:
    """Drop ``default`` everywhere: status is written whole by the operator, never defaulted."""
    if isinstance(node, dict):
        return {k: _strip_defaults(v) for k, v in node.items() if k != "default"}
    if isinstance(node, list):
        return [_strip_defaults(v) for v in node]
    return node


def _validations(rules: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "rule": r.cel,
            "message": r.message,
            **({"fieldPath": r.field_path} if r.field_path else {}),
            "reason": "FieldValueInvalid",
        }
        for r in rules
    ]


def _attach_rules(spec_schema: dict[str, Any]) -> None:
    props = spec_schema["properties"]
    targets = {
        "spec": spec_schema,
        "spec.parallelism": props["parallelism"],
        "spec.engine": props["engine"],
        "spec.model": props["model"],
        # Per-item rules run on each item, so the API server names the item's index.
        "spec.engine.extraArgs": props["engine"]["properties"]["extraArgs"]["items"],
        "spec.disaggregation": props["disaggregation"],
    }
    for scope, node in targets.items():
        rules = rules_for_scope(scope)
        if rules:
            node["x-kubernetes-validations"] = _validations(rules)
    _attach_role_rules(props["disaggregation"]["properties"]["roles"]["items"])


def _attach_role_rules(role: dict[str, Any]) -> None:
    """The aggregated rules a role shares (:data:`ROLE_RULES`) on the role's schema nodes.

    Only rules whose CEL reads fields the role's node has: the API server type-checks every
    rule against its node's schema, so a rule naming an absent field would refuse the CRD.
    """
    by_name = {r.name: r for r in SPEC_RULES}
    engine = role["properties"]["engine"]
    nodes = {
        "role": role,
        "parallelism": role["properties"]["parallelism"],
        "engine": engine,
        "extraArgs": engine["properties"]["extraArgs"]["items"],
    }
    own = {"engine": rules_for_scope("spec.disaggregation.roles.engine")}
    for key, node in nodes.items():
        # A role's own rules first: their message is the more specific one.
        rules = own.get(key, []) + [by_name[name] for name in ROLE_RULES[key]]
        node["x-kubernetes-validations"] = _validations(rules)


def build_crd() -> dict[str, Any]:
    """The CustomResourceDefinition object for DeepSeekServing."""
    spec_schema = _schema_of(DeepSeekServingSpec)
    spec_schema["description"] = DeepSeekServingSpec.__doc__ or ""
    _nullable_optionals(spec_schema)
    _attach_rules(spec_schema)
    status_schema = _strip_defaults(_schema_of(DeepSeekServingStatus))
    status_schema["description"] = DeepSeekServingStatus.__doc__ or ""
    root = {
        "type": "object",
        "description": "DeepSeekServing serves a DeepSeek V4/V4.1 checkpoint with vLLM and "
        "chooses the MoE backend from the GPUs of the cluster's nodes.",
        "required": ["spec"],
        "x-kubernetes-validations": [
            {
                "rule": rule.crd_rule,
                "message": rule.message,
                "reason": "FieldValueInvalid",
                # Without it the API server reports the root rule at "<nil>", no field at all.
                "fieldPath": ".metadata.name",
                **({"optionalOldSelf": True} if rule.create_only else {}),
            }
            for rule in NAME_RULES
        ],
        "properties": {
            "apiVersion": {"type": "string", "description": "API version of this object."},
            "kind": {"type": "string", "description": "Kind of this object."},
            # Declared only so the name rule's fieldPath can point at it (the one metadata
            # field a CRD schema may describe besides generateName).
            "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
            "spec": spec_schema,
            "status": status_schema,
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {LABEL_NAME: PROJECT},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": SHORT_NAMES,
                "categories": CATEGORIES,
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def crd_yaml() -> str:
    """The CRD as the YAML text checked in under ``crds/``."""
    header = "# Generated by `deepseek-operator crds` from operator/deepseek_operator/api/. Do not edit.\n"
    return header + yaml.safe_dump(build_crd(), sort_keys=False, width=100)
