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
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

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
# Printable ASCII other than '=': the env var name rule (RelaxedEnvironmentVariableValidation, GA
# and locked on since Kubernetes 1.34).
ENV_NAME_PATTERN = r"^[ -<>-~]+$"
# A ConfigMap or Secret key.
CONFIG_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"

# The container resources the core API knows without a domain; hugepages-<size> is left out on
# purpose (vLLM does not use them, and their page-size and cpu/memory rules are not mirrored).
STANDARD_CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")
# Where the rendered pod already mounts a volume of its own (render/workload.py pod_template).
RESERVED_MOUNT_PATHS = ("/dev/shm",)
# The Downward API fields an env var may read (validEnvDownwardAPIFieldPathExpressions).
ENV_FIELD_PATHS = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
)
# The container resources an env var may read, and the divisors the API accepts for each kind.
ENV_RESOURCE_FIELDS = (
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
)
_CPU_DIVISORS = ("0", "1m", "1")
_BYTE_DIVISORS: tuple[str, ...] = ("0", "1", "1k", "1M", "1G", "1T", "1P", "1E")
_BYTE_DIVISORS += ("1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei")


def _cel_str_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def cel_rule(rule: str, message: str, field_path: str = "") -> dict[str, str]:
    """One ``x-kubernetes-validations`` entry (the API server and api/admission.py run it)."""
    entry = {"rule": rule, "message": message, "reason": "FieldValueInvalid"}
    if field_path:
        entry["fieldPath"] = field_path
    return entry


def _validations(*rules: dict[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": list(rules)}


def _label_key(var: str) -> str:
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
    f"(k in {_cel_str_list(STANDARD_CONTAINER_RESOURCES)} || {_EXTENDED} || "
    f"(k.contains('kubernetes.io/') && {_label_key('k')}))"
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
GPU_RESOURCE_RULES = _validations(GPU_RESOURCE_RULE)


class CoreModel(BaseModel):
    """Base of the core/v1 models: camelCase aliases, no unknown fields, frozen."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
        frozen=True,
    )

    def manifest(self) -> dict[str, Any]:
        """The object as it goes into the pod template: camelCase, unset fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True)


class ObjectFieldSelector(CoreModel):
    """A field of the pod (the Downward API) as an env var's value."""

    api_version: Literal["v1"] | None = None
    """Schema version of fieldPath; only v1."""

    field_path: str = Field(
        max_length=512,
        json_schema_extra=_validations(
            cel_rule(
                f"self in {_cel_str_list(ENV_FIELD_PATHS)} || "
                '(self.startsWith("metadata.labels[\'") && self.endsWith("\']") && '
                + _label_key("self.substring(17, size(self) - 2)")
                + ') || (self.startsWith("metadata.annotations[\'") && '
                'self.endsWith("\']") && '
                + _label_key("self.substring(22, size(self) - 2).lowerAscii()")
                + ")",
                "fieldPath must be one of "
                + ", ".join(ENV_FIELD_PATHS)
                + ", metadata.labels['<label key>'] or metadata.annotations['<key>']",
            )
        ),
    )
    """Path of the field, e.g. metadata.name or metadata.labels['app']."""


# CEL on a ResourceFieldSelector: the divisor the API accepts for the resource read (its
# canonical spelling; 0 means unset).
_DIVISOR_RULE = cel_rule(
    "!has(self.divisor) || (self.resource.endsWith('.cpu') ? string(self.divisor) in "
    f"{_cel_str_list(_CPU_DIVISORS)} : string(self.divisor) in {_cel_str_list(_BYTE_DIVISORS)})",
    "divisor must be 1m or 1 for a cpu resource and one of "
    + ", ".join(_BYTE_DIVISORS[1:])
    + " for memory and ephemeral-storage",
    ".divisor",
)


class ResourceFieldSelector(CoreModel):
    """A resource request or limit of a container as an env var's value."""

    model_config = ConfigDict(json_schema_extra=_validations(_DIVISOR_RULE))

    container_name: str | None = Field(default=None, max_length=253)
    """Container whose resource is read; default this one."""

    resource: str = Field(
        max_length=64,
        json_schema_extra=_validations(
            cel_rule(
                f"self in {_cel_str_list(ENV_RESOURCE_FIELDS)}",
                "resource must be one of " + ", ".join(ENV_RESOURCE_FIELDS),
            )
        ),
    )
    """The resource, e.g. limits.memory."""

    divisor: int | str | None = Field(default=None, json_schema_extra={"maxLength": 32})
    """Unit the value is divided by (1m or 1 for cpu; 1, 1Ki, 1Mi, 1Gi, … for memory)."""


class KeySelector(CoreModel):
    """A key of a ConfigMap or Secret in the serving's namespace."""

    name: str = Field(
        max_length=253,
        json_schema_extra=_validations(
            cel_rule(
                f"self.matches(r'{DNS_SUBDOMAIN_PATTERN}')",
                "name must be a DNS-1123 subdomain (lower-case alphanumerics, '-' and '.', "
                "alphanumeric at both ends): the name of a ConfigMap or Secret",
            )
        ),
    )
    """Name of the ConfigMap or Secret."""

    key: str = Field(
        max_length=253,
        json_schema_extra=_validations(
            cel_rule(
                f"self.matches(r'{CONFIG_KEY_PATTERN}') && self != '.' && !self.startsWith('..')",
                "key must consist of alphanumeric characters, '-', '_' or '.', and must not be "
                "'.' nor start with '..'",
            )
        ),
    )
    """The key to read."""

    optional: bool | None = None
    """Whether the ConfigMap or Secret (or its key) may be missing."""


class EnvVarSource(CoreModel):
    """Where an env var's value comes from: exactly one source."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            cel_rule(
                "[has(self.fieldRef), has(self.resourceFieldRef), has(self.configMapKeyRef), "
                "has(self.secretKeyRef)].filter(x, x).size() == 1",
                "valueFrom must set exactly one of fieldRef, resourceFieldRef, configMapKeyRef or "
                "secretKeyRef",
            )
        )
    )

    field_ref: ObjectFieldSelector | None = None
    """A field of the pod."""

    resource_field_ref: ResourceFieldSelector | None = None
    """A resource request or limit of a container."""

    config_map_key_ref: KeySelector | None = None
    """A key of a ConfigMap."""

    secret_key_ref: KeySelector | None = None
    """A key of a Secret."""


class EnvVar(CoreModel):
    """A core/v1 EnvVar of the vLLM container."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            cel_rule(
                "!has(self.valueFrom) || !has(self.value) || self.value == ''",
                "valueFrom must not be set when value is not empty",
                ".valueFrom",
            )
        )
    )

    name: str = Field(
        max_length=4096,
        json_schema_extra=_validations(
            cel_rule(
                f"self.matches(r'{ENV_NAME_PATTERN}')",
                "an environment variable name must be one or more printable ASCII characters "
                "other than '='",
            )
        ),
    )
    """Name of the variable; names are unique in the list."""

    value: str | None = None
    """Literal value (a string: quote numbers)."""

    value_from: EnvVarSource | None = None
    """Source of the value when it is not literal."""


def _int64(value: int) -> int:
    """``value``, refused when a Go int64 (the pod API's type) cannot hold it."""
    if not -(2**63) <= value <= 2**63 - 1:
        raise ValueError(f"{value} does not fit a 64-bit integer")
    return value


_EXISTS = "(has(self.operator) && self.operator == 'Exists')"


class Toleration(CoreModel):
    """A core/v1 Toleration of the serving pods."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
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
        json_schema_extra=_validations(
            cel_rule(f"self == '' || ({_label_key('self')})", f"key must be {LABEL_KEY_RULE}")
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


NODE_SELECTOR_RULES = _validations(
    cel_rule(
        f"self.all(k, {_label_key('k')})",
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
RESOURCES_RULES = _validations(
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

CLAIM_NAME_RULES = _validations(
    cel_rule(
        f"self == '' || self.matches(r'{DNS_SUBDOMAIN_PATTERN}')",
        "spec.modelCache.claimName must be the name of a PersistentVolumeClaim: a DNS-1123 "
        "subdomain (lower-case alphanumerics, '-' and '.', alphanumeric at both ends)",
    )
)
MOUNT_PATH_RULES = _validations(
    cel_rule(
        f"self != '' && !(self in {_cel_str_list(RESERVED_MOUNT_PATHS)})",
        "spec.modelCache.mountPath must be a non-empty path other than "
        + ", ".join(RESERVED_MOUNT_PATHS)
        + " (the pod mounts its shared-memory volume there)",
    )
)
