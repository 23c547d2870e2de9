"""Admit a DeepSeekServing offline exactly as the API server does, from the generated CRD itself.

``render`` must refuse what ``kubectl apply`` refuses and accept what it accepts, so instead of a
second hand-written copy of the rules this module runs the generated CRD's own structural schema
(:func:`deepseek_operator.api.crd.build_crd`) the way kube-apiserver's apiextensions code does:

1. ``metadata``: ``name`` a DNS-1123 subdomain, ``namespace`` a DNS-1123 label, known fields
   only, labels and annotations with string values;
2. no unknown field anywhere the schema does not preserve unknown fields (``kubectl`` sends
   ``fieldValidation=Strict``);
3. ``null`` in an object field is dropped, then the schema's ``default`` values are filled in:
   a non-nullable null is pruned (or defaulted) by the API server, and the optional fields
   without a default are ``nullable``, whose null the API server keeps and its CEL reads as
   absent, so to the operator it is the same "unset";
4. strict types (``"4"`` is no integer, ``"true"`` no boolean; a float with an integral value is
   the integer ``kubectl`` turns it into), ``minimum``/``maximum``, lengths, item counts, enums;
5. list-map uniqueness (``x-kubernetes-list-type: map``: no two items with the same keys);
6. every ``x-kubernetes-validations`` CEL rule, evaluated by the ``cel`` package
   (common-expression-language) with cel-go's extension libraries and Kubernetes' quantity
   library, as Kubernetes loads them, on the defaulted object.

The result is the defaulted object; the first problem raises a
:class:`~deepseek_operator.errors.SpecError` naming the field, the value and the rule.

This module holds the entry point (:func:`admit`) and the ``metadata`` checks (1);
:mod:`.admission_schema` walks the structural schema (2-5) and :mod:`.admission_cel` runs the
CEL rules (6).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from deepseek_operator.api.admission_cel import run_rules
from deepseek_operator.api.admission_schema import type_name, walk
from deepseek_operator.api.rules.values import NAME_RULES
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

# --- metadata --------------------------------------------------------------------------------


def _check_qualified_key(path: str, key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if (
        (prefix and (len(prefix) > 253 or not _DNS_1123_SUBDOMAIN.match(prefix)))
        or not name
        or len(name) > 63
        or not _QUALIFIED_NAME.match(name)
    ):
        raise SpecError(
            path,
            key,
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character (at most 63 characters), with an optional "
            "DNS subdomain prefix and '/'",
        )


def _check_metadata(meta: Any) -> None:
    if not isinstance(meta, dict):
        raise SpecError("metadata", meta, "must be of type object")
    for key in meta:
        if key not in _METADATA_FIELDS:
            raise SpecError(f"metadata.{key}", None, "unknown field (not in ObjectMeta)")
    name = meta.get("name")
    if name is None:
        raise SpecError("metadata.name", None, "Required value: name or generateName is required")
    if not isinstance(name, str):
        raise SpecError("metadata.name", name, "must be of type string")
    if len(name) > 253 or not _DNS_1123_SUBDOMAIN.match(name):
        raise SpecError(
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
        raise SpecError("metadata.namespace", namespace, "must be a DNS-1123 label")
    labels = meta.get("labels")
    if labels is not None:
        if not isinstance(labels, dict):
            raise SpecError("metadata.labels", labels, "must be of type object")
        for key, raw in labels.items():
            _check_qualified_key("metadata.labels", key)
            value = "" if raw is None else raw  # Go decodes null into a map[string]string as ""
            if not isinstance(value, str):
                raise SpecError(f"metadata.labels.{key}", value, "must be of type string")
            if len(value) > 63 or not _LABEL_VALUE.match(value):
                raise SpecError(
                    "metadata.labels",
                    value,
                    "a valid label must be an empty string or consist of alphanumeric characters, "
                    "'-', '_' or '.', and must start and end with an alphanumeric character (at "
                    "most 63 characters)",
                )
    annotations = meta.get("annotations")
    if annotations is not None:
        if not isinstance(annotations, dict):
            raise SpecError("metadata.annotations", annotations, "must be of type object")
        size = 0
        for key, raw in annotations.items():
            _check_qualified_key("metadata.annotations", key)
            value = "" if raw is None else raw  # Go decodes null into a map[string]string as ""
            if not isinstance(value, str):
                raise SpecError(f"metadata.annotations.{key}", value, "must be of type string")
            size += len(key.encode()) + len(value.encode())
        if size > _ANNOTATIONS_MAX_BYTES:
            raise SpecError(
                "metadata.annotations",
                size,
                f"Too long: must have at most {_ANNOTATIONS_MAX_BYTES} bytes",
            )


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
        raise SpecError("(document)", type_name(obj), "must be a DeepSeekServing object")
    for key in obj:
        if key not in _ROOT_FIELDS:
            raise SpecError(key, None, "unknown field (not in the DeepSeekServing schema)")
    _check_metadata(obj.get("metadata"))
    schema = _root_schema()
    body = {k: v for k, v in obj.items() if k not in ("status", "metadata") and v is not None}
    if "spec" not in body:
        raise SpecError("spec", None, "Required value")
    spec = walk("spec", body["spec"], schema["properties"]["spec"])
    meta = obj["metadata"]
    # The root rules see metadata.name and generateName only, as in the API server.
    root = {
        "metadata": {k: meta[k] for k in ("name", "generateName") if k in meta},
        "spec": spec,
    }
    # A stored object (it has a uid) was admitted when created: the create-only name rules
    # (the CRD's optionalOldSelf transition rules) pass every update, so they pass here too.
    stored = bool(meta.get("uid"))
    rules = [
        {"rule": r.cel, "message": r.message} for r in NAME_RULES if not (r.create_only and stored)
    ]
    try:
        run_rules("", root, {"x-kubernetes-validations": rules})
    except SpecError as exc:
        # The root's rules are all about metadata.name (the CRD names it in fieldPath).
        raise SpecError("metadata.name", meta.get("name"), exc.message) from None
    admitted = dict(obj)
    admitted["spec"] = spec
    return admitted
