"""The env vars of the vLLM container (``spec.env``), typed as the apps API checks them.

An :class:`EnvVar` has a literal value or one source (:class:`EnvVarSource`): a field of the pod
(the Downward API), a resource request or limit of a container, or a key of a ConfigMap or
Secret. Each carries the rules kube-apiserver applies to a pod template's env (names, the
Downward API field paths and resource fields it may read, the divisors per resource kind, key
names) as CEL rules with the same words offline and in the API server; the shared patterns and
helpers are :mod:`.core_v1`'s.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from deepseek_operator.api.base import ApiModel
from deepseek_operator.api.core_v1 import (
    DNS_SUBDOMAIN_PATTERN,
    cel_rule,
    cel_str_list,
    label_key,
    validations,
)

# Printable ASCII other than '=': the env var name rule (RelaxedEnvironmentVariableValidation, GA
# and locked on since Kubernetes 1.34).
ENV_NAME_PATTERN = r"^[ -<>-~]+$"
# A ConfigMap or Secret key.
CONFIG_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
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


class ObjectFieldSelector(ApiModel):
    """A field of the pod (the Downward API) as an env var's value."""

    api_version: Literal["v1", ""] | None = None
    """Schema version of fieldPath; only v1 (empty is v1: the API server defaults it so)."""

    field_path: str = Field(
        max_length=512,
        json_schema_extra=validations(
            cel_rule(
                f"self in {cel_str_list(ENV_FIELD_PATHS)} || "
                '(self.startsWith("metadata.labels[\'") && self.endsWith("\']") && '
                + label_key("self.substring(17, size(self) - 2)")
                + ') || (self.startsWith("metadata.annotations[\'") && '
                'self.endsWith("\']") && '
                + label_key("self.substring(22, size(self) - 2).lowerAscii()")
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
    f"{cel_str_list(_CPU_DIVISORS)} : string(self.divisor) in {cel_str_list(_BYTE_DIVISORS)})",
    "divisor must be 1m or 1 for a cpu resource and one of "
    + ", ".join(_BYTE_DIVISORS[1:])
    + " for memory and ephemeral-storage",
    ".divisor",
)


class ResourceFieldSelector(ApiModel):
    """A resource request or limit of a container as an env var's value."""

    model_config = ConfigDict(json_schema_extra=validations(_DIVISOR_RULE))

    container_name: str | None = Field(default=None, max_length=253)
    """Container whose resource is read; default this one."""

    resource: str = Field(
        max_length=64,
        json_schema_extra=validations(
            cel_rule(
                f"self in {cel_str_list(ENV_RESOURCE_FIELDS)}",
                "resource must be one of " + ", ".join(ENV_RESOURCE_FIELDS),
            )
        ),
    )
    """The resource, e.g. limits.memory."""

    divisor: int | str | None = Field(default=None, json_schema_extra={"maxLength": 32})
    """Unit the value is divided by (1m or 1 for cpu; 1, 1Ki, 1Mi, 1Gi, … for memory)."""


class KeySelector(ApiModel):
    """A key of a ConfigMap or Secret in the serving's namespace."""

    name: str = Field(
        max_length=253,
        json_schema_extra=validations(
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
        json_schema_extra=validations(
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


class EnvVarSource(ApiModel):
    """Where an env var's value comes from: exactly one source."""

    model_config = ConfigDict(
        json_schema_extra=validations(
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


class EnvVar(ApiModel):
    """A core/v1 EnvVar of the vLLM container."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel_rule(
                "!has(self.valueFrom) || !has(self.value) || self.value == ''",
                "valueFrom must not be set when value is not empty",
                ".valueFrom",
            )
        )
    )

    name: str = Field(
        max_length=4096,
        json_schema_extra=validations(
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
