"""The core/v1 parts a DeepSeekServing embeds in its pod template, typed as the apps API checks them.

``spec.env``, ``spec.tolerations``, ``spec.nodeSelector``, ``spec.resources``, ``spec.modelCache``
and ``spec.gpuResourceName`` end up verbatim in the Deployment / LeaderWorkerSet pod template. An
accepted DeepSeekServing whose child the API then refuses never runs, so these models carry the
rules kube-apiserver (the version in hack/versions.env) applies to the same values
(pkg/apis/core/validation): as schema types and enums, and as CEL rules
(``x-kubernetes-validations``) that the API server runs from the CRD and api/admission.py runs
offline, so both say the same words. The field path and the value come with every refusal; each
message states the rule.

Where the pod template would refuse only a few exotic values that vLLM never needs, the rule here
is a little stricter and says so (hugepages in ``spec.resources``, a ``fileKeyRef`` env source).

This module holds the shared patterns and CEL helpers, and the tolerations,
node selector, resources, GPU resource name and model cache rules; :mod:`.core_v1_env` holds the
env var models.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field

from deepseek_operator.api.base import ApiModel

# A non-negative Kubernetes resource quantity (k8s.io/apimachinery resource.Quantity), e.g. 32Gi
# or 500m: ParseQuantity's grammar (its exponent is an integer), '-' only before a zero.
QUANTITY_PATTERN = (
    r"^([+]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))|-((0+(\.0*)?)|(\.0+)))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?[0-9]+))?$"
)
# A DNS-1123 subdomain (what a Secret, ConfigMap or PersistentVolumeClaim is named).
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# A label key (a qualified name): an optional DNS-subdomain prefix and '/', then a name of at
# most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric. CEL's RE2 has
# no look-ahead, so the prefix's 253-character bound is a separate indexOf test.
_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_KEY_PATTERN = rf"^({_PREFIX}/)?{_NAME}$"
EXTENDED_NAME_PATTERN = rf"^{_PREFIX}/{_NAME}$"
# A label value: empty, or at most 63 alphanumerics, '-', '_' or '.', alphanumeric at both ends.
# The longest label key: a 253-character prefix, '/', a 63-character name.
LABEL_KEY_MAX_LENGTH = 253 + 1 + 63
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"

# The container resources the core API knows without a domain; hugepages-<size> is left out on
# purpose (vLLM does not use them, and their page-size and cpu/memory rules are not mirrored).
STANDARD_CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")
# Where the rendered pod already mounts a volume of its own (render/workload.py pod_template).
RESERVED_MOUNT_PATHS = ("/dev/shm",)


def cel_str_list(values: tuple[str, ...]) -> str:
    """CEL: a list literal of the strings ``values``."""
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def cel_rule(rule: str, message: str, field_path: str = "") -> dict[str, str]:
    """One ``x-kubernetes-validations`` entry (the API server and api/admission.py run it)."""
    entry = {"rule": rule, "message": message, "reason": "FieldValueInvalid"}
    if field_path:
        entry["fieldPath"] = field_path
    return entry


def validations(*rules: dict[str, str]) -> dict[str, Any]:
    """A schema extension carrying the CEL ``rules``."""
    return {"x-kubernetes-validations": list(rules)}


def label_key(var: str) -> str:
    """CEL: ``var`` is a label key (pattern, and the prefix's length bound)."""
    return f"{var}.matches(r'{LABEL_KEY_PATTERN}') && {var}.indexOf('/') <= 253"


LABEL_KEY_RULE = (
    "a label key: an optional DNS-subdomain prefix (at most 253 characters) and '/', then a name "
    "of at most 63 alphanumeric characters, '-', '_' or '.' that starts and ends with an "
    "alphanumeric character"
)
LABEL_VALUE_RULE = (
    "a label value: empty, or at most 63 alphanumeric characters, '-', '_' or '.' that starts "
    "and ends with an alphanumeric character"
)
QUANTITY_RULE = "a non-negative resource quantity such as 16, 500m, 600Gi or 1e3"


# A resource amount: an integer or a quantity string (bounded, so the CEL rules' cost is too).
Amount = Annotated[int | str, Field(json_schema_extra={"maxLength": 64})]


def is_native_resource(name: str) -> bool:
    """Kubernetes' IsNativeResource: no domain, or in the ``kubernetes.io`` namespace."""
    return "/" not in name or "kubernetes.io/" in name


# CEL of the same tests, on a resource name ``k``.
_NATIVE = "(!k.contains('/') || k.contains('kubernetes.io/'))"
_EXTENDED = (
    f"(k.matches(r'{EXTENDED_NAME_PATTERN}') && !k.contains('kubernetes.io/') && "
    "!k.startsWith('requests.') && k.indexOf('/') <= 244)"
)
_CONTAINER_RESOURCE = (
    f"(k in {cel_str_list(STANDARD_CONTAINER_RESOURCES)} || {_EXTENDED} || "
    f"(k.contains('kubernetes.io/') && {label_key('k')}))"
)
GPU_RESOURCE_RULE = cel_rule(
    rule=_EXTENDED.replace("k.", "self."),
    message=(
        "spec.gpuResourceName must be a domain-qualified extended resource name such as "
        "nvidia.com/gpu or amd.com/gpu (a DNS-subdomain prefix that is not kubernetes.io or "
        "*.kubernetes.io and does not start with 'requests.', '/', and a name of at most 63 "
        "alphanumeric characters, '-', '_' or '.'): a native resource such as cpu, memory, "
        "ephemeral-storage, pods or hugepages-<size> is no GPU"
    ),
)
GPU_RESOURCE_RULES = validations(GPU_RESOURCE_RULE)


def _int64(value: int) -> int:
    """``value``, refused when a Go int64 (the pod API's type) cannot hold it."""
    if not -(2**63) <= value <= 2**63 - 1:
        raise ValueError(f"{value} does not fit a 64-bit integer")
    return value


_EXISTS = "(has(self.operator) && self.operator == 'Exists')"


class Toleration(ApiModel):
    """A core/v1 Toleration of the serving pods."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel_rule(
                f"(has(self.key) && self.key != '') || {_EXISTS}",
                "operator must be Exists when key is empty (which matches every key and value)",
                ".operator",
            ),
            cel_rule(
                "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
                "effect must be NoExecute when tolerationSeconds is set",
                ".effect",
            ),
            cel_rule(
                f"!has(self.value) || ({_EXISTS} ? self.value == '' : "
                f"self.value.matches(r'{LABEL_VALUE_PATTERN}'))",
                f"value must be empty when operator is Exists, and otherwise {LABEL_VALUE_RULE}",
                ".value",
            ),
        )
    )

    key: str | None = Field(
        default=None,
        max_length=LABEL_KEY_MAX_LENGTH,
        json_schema_extra=validations(
            cel_rule(f"self == '' || ({label_key('self')})", f"key must be {LABEL_KEY_RULE}")
        ),
    )
    """Taint key; empty with operator Exists matches every taint."""

    operator: Literal["", "Equal", "Exists"] | None = None
    """Equal (the default) or Exists."""

    value: str | None = Field(default=None, max_length=63)
    """Taint value to match with operator Equal; empty with Exists."""

    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to match; empty matches every effect."""

    # The int64 range is checked here, not in the schema: the API server compares schema bounds
    # as float64, and bounds at the int64 extremes made it refuse every value. Without bounds it
    # accepts every int64 and refuses anything wider as "must be of type integer", like the pod.
    toleration_seconds: Annotated[int, AfterValidator(_int64)] | None = None
    """How long a NoExecute taint is tolerated before eviction; only with effect NoExecute."""


NODE_SELECTOR_RULES = validations(
    cel_rule(
        f"self.all(k, {label_key('k')})",
        f"spec.nodeSelector: every key must be {LABEL_KEY_RULE}",
    ),
    cel_rule(
        f"self.all(k, self[k].matches(r'{LABEL_VALUE_PATTERN}'))",
        f"spec.nodeSelector: every value must be {LABEL_VALUE_RULE}",
    ),
)


def _whole(amount: str) -> str:
    """CEL: ``amount`` is whole as the pod's API counts it (its milli-value, rounded up, is 1000k).

    quantity().isInteger() is stricter: it is false for "1.0" or "1000m", which pods accept. Below
    1P the integer at or just above the amount is found from its float value, and the amount is
    compared with it exactly: whole when it lies within 1m below that integer.
    """
    q = f"quantity({amount})"
    near = f"int({q}.asApproximateFloat())"

    def within(n: str) -> str:
        return f"({q}.sub({n}).compareTo(quantity('0')) <= 0 && {q}.sub({n}).isGreaterThan(quantity('-1m')))"

    return (
        f"({q}.isInteger() || ({q}.isLessThan(quantity('1P')) && "
        f"({within(near)} || {within(near + ' + 1')})))"
    )


def _resource_list_rules(field: str) -> list[dict[str, str]]:
    amount = f"string(self.{field}[k])"
    return [
        cel_rule(
            f"!has(self.{field}) || self.{field}.all(k, {_CONTAINER_RESOURCE})",
            f"spec.resources.{field}: every name must be cpu, memory, ephemeral-storage or a "
            "domain-qualified extended resource (example.com/foo; not requests.*)",
            f".{field}",
        ),
        cel_rule(
            f"!has(self.{field}) || self.{field}.all(k, {amount}.matches(r'{QUANTITY_PATTERN}'))",
            f"spec.resources.{field}: every amount must be {QUANTITY_RULE}",
            f".{field}",
        ),
        cel_rule(
            f"!has(self.{field}) || self.{field}.all(k, {_NATIVE} || {_whole(amount)})",
            f"spec.resources.{field}: the amount of an extended resource must be a whole number",
            f".{field}",
        ),
    ]


_REQ = "quantity(string(self.requests[k]))"
_LIM = "quantity(string(self.limits[k]))"
RESOURCES_RULES = validations(
    *_resource_list_rules("requests"),
    *_resource_list_rules("limits"),
    cel_rule(
        "!has(self.requests) || self.requests.all(k, !(has(self.limits) && k in self.limits) ? "
        f"{_NATIVE} : ({_NATIVE} ? {_REQ}.compareTo({_LIM}) <= 0 : "
        f"{_REQ}.compareTo({_LIM}) == 0))",
        "spec.resources.requests: a request must not exceed the limit of the same resource, and "
        "an extended resource needs a limit equal to its request",
        ".requests",
    ),
)

CLAIM_NAME_RULES = validations(
    cel_rule(
        f"self == '' || self.matches(r'{DNS_SUBDOMAIN_PATTERN}')",
        "spec.modelCache.claimName must be the name of a PersistentVolumeClaim: a DNS-1123 "
        "subdomain (lower-case alphanumerics, '-' and '.', alphanumeric at both ends)",
    )
)
SECRET_NAME_RULES = validations(
    cel_rule(
        f"self.matches(r'{DNS_SUBDOMAIN_PATTERN}')",
        "spec.modelCache.fill.tokenSecretRef.name must be the name of a Secret: a DNS-1123 "
        "subdomain (lower-case alphanumerics, '-' and '.', alphanumeric at both ends)",
    )
)
MODEL_CACHE_RULES = validations(
    cel_rule(
        "!has(self.fill) || (has(self.claimName) && self.claimName != '')",
        "spec.modelCache.fill needs spec.modelCache.claimName: the ReadWriteMany "
        "PersistentVolumeClaim the operator fills",
    )
)
MOUNT_PATH_RULES = validations(
    cel_rule(
        f"self != '' && !(self in {cel_str_list(RESERVED_MOUNT_PATHS)})",
        "spec.modelCache.mountPath must be a non-empty path other than "
        + ", ".join(RESERVED_MOUNT_PATHS)
        + " (the pod mounts its shared-memory volume there)",
    )
)
