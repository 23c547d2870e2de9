"""``spec.router``: the vLLM router the operator runs in front of a serving's pools.

A disaggregated serving answers only when something sends each request to a prefill engine first
and then, with the ``kv_transfer_params`` the prefill returned, to a decode engine. The operator
runs vLLM's own router (``vllm-router``, PyPI) for it in P/D mode with Kubernetes discovery of
each role's pods, behind one Service named after the serving. An aggregated serving with several
replicas may ask for the same router (not in P/D mode) for prefix-cache-aware routing instead of
kube-proxy's round robin. ``enabled: false`` leaves routing to the user's own gateway (the
InferencePool of ``spec.disaggregation.endpointPicker``).

``engineAccessFrom`` names who else may reach the vLLM engines' HTTP port directly (the user's
gateway, Prometheus): the operator's NetworkPolicies admit the router and these peers only.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import ConfigDict, Field

from deepseek_operator.api.base import ApiModel
from deepseek_operator.api.core_v1 import (
    LABEL_KEY_MAX_LENGTH,
    LABEL_KEY_RULE,
    LABEL_VALUE_PATTERN,
    cel_rule,
    label_key,
    validations,
)
from deepseek_operator.api.sections import ResourcesSpec

RouterPolicy = Literal[
    "random",
    "round_robin",
    "cache_aware",
    "kv_aware",
    "power_of_two",
    "consistent_hash",
    "sticky_least_loaded",
]
"""vllm-router's ``--policy`` choices (vllm_router/router_args.py of the pinned release)."""
ROUTER_POLICIES: tuple[str, ...] = get_args(RouterPolicy)
"""The same choices as a tuple (what the conformance test compares with vllm-router's)."""
MAX_ROUTER_REPLICAS = 64
MAX_ENGINE_PEERS = 16

# An OCI image reference as a container's image field takes it: no whitespace, no scheme.
IMAGE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$"
# An IPv4 or IPv6 CIDR; the API server parses it again when it writes the NetworkPolicy.
CIDR_PATTERN = r"^([0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}|[0-9A-Fa-f:.]+/[0-9]{1,3})$"

_LABEL_VALUE = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)]


class LabelSelectorRequirement(ApiModel):
    """A metav1.LabelSelectorRequirement."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel_rule(
                "self.operator in ['Exists', 'DoesNotExist'] ? !has(self.values) || "
                "size(self.values) == 0 : has(self.values) && size(self.values) > 0",
                "values must be empty when operator is Exists or DoesNotExist, and set when it "
                "is In or NotIn",
                ".values",
            )
        )
    )

    key: str = Field(
        max_length=LABEL_KEY_MAX_LENGTH,
        json_schema_extra=validations(cel_rule(label_key("self"), f"key must be {LABEL_KEY_RULE}")),
    )
    """The label key the selector applies to."""

    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    """In, NotIn, Exists or DoesNotExist."""

    values: list[_LABEL_VALUE] | None = Field(default=None, max_length=64)
    """Values for In and NotIn; empty for Exists and DoesNotExist."""


class LabelSelector(ApiModel):
    """A metav1.LabelSelector: every matchLabels pair and every matchExpressions item must hold."""

    match_labels: dict[str, _LABEL_VALUE] | None = Field(
        default=None,
        max_length=32,
        json_schema_extra=validations(
            cel_rule(f"self.all(k, {label_key('k')})", f"every key must be {LABEL_KEY_RULE}")
        ),
    )
    """Label key/value pairs; values of at most 63 alphanumerics, '-', '_' or '.'."""

    match_expressions: list[LabelSelectorRequirement] | None = Field(default=None, max_length=16)
    """Set-based requirements."""


class IPBlock(ApiModel):
    """A networking/v1 IPBlock: a CIDR and the CIDRs inside it to leave out."""

    cidr: str = Field(max_length=64, pattern=CIDR_PATTERN)
    """An IPv4 or IPv6 CIDR, e.g. 10.0.0.0/16."""

    except_: list[Annotated[str, Field(max_length=64, pattern=CIDR_PATTERN)]] | None = Field(
        default=None, alias="except", max_length=16
    )
    """CIDRs inside cidr that are not admitted."""


class EnginePeer(ApiModel):
    """Who may reach the vLLM engines' HTTP port besides the router: a networking/v1
    NetworkPolicyPeer (pods by label, in this namespace or in the namespaces namespaceSelector
    picks, or addresses by CIDR)."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel_rule(
                "has(self.ipBlock) != (has(self.podSelector) || has(self.namespaceSelector))",
                "set ipBlock alone, or podSelector and/or namespaceSelector (a NetworkPolicy "
                "peer is one or the other)",
            )
        )
    )

    pod_selector: LabelSelector | None = None
    """Pods with these labels (in this namespace, or in the namespaces namespaceSelector picks)."""

    namespace_selector: LabelSelector | None = None
    """Every pod of the namespaces with these labels ({} is every namespace)."""

    ip_block: IPBlock | None = None
    """Addresses by CIDR (for peers outside the pod network: node-local agents, load balancers)."""


class RouterSpec(ApiModel):
    """The vLLM router (vllm-router) in front of the serving's engines: the one endpoint."""

    enabled: bool | None = None
    """Run the router. Default: true for a disaggregated serving (a prefill/decode pair serves only through a P/D router), false for an aggregated one (set true for prefix-cache-aware routing over several replicas). false on a disaggregated serving leaves routing to your own gateway (spec.disaggregation.endpointPicker)."""

    replicas: int = Field(default=1, ge=1, le=MAX_ROUTER_REPLICAS)
    """Router pods (each routes on its own: cache_aware's prefix tree is per pod)."""

    policy: RouterPolicy = "cache_aware"
    """vllm-router --policy: cache_aware (prefix-cache-aware, the default), round_robin, random, power_of_two, consistent_hash, kv_aware or sticky_least_loaded. In P/D mode both roles use it."""

    image: str | None = Field(
        default=None,
        max_length=1024,
        pattern=IMAGE_PATTERN,
    )
    """Router container image (it must run vllm-router of the release the operator renders flags for). Default: the operator's router image (the chart's router.image)."""

    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    """CPU/memory requests and limits of the router container (default: 100m CPU, 256Mi memory requested)."""

    engine_access_from: list[EnginePeer] = Field(default_factory=list, max_length=MAX_ENGINE_PEERS)
    """Who else may open the vLLM engines' HTTP port (NetworkPolicy peers), e.g. your gateway or Prometheus. With the router on, the engines admit the router and these only; with it off and this empty, the HTTP port stays open to every pod."""

    def active(self, disaggregated: bool) -> bool:
        """Whether the router runs, with the default of the serving's layout applied."""
        return self.enabled if self.enabled is not None else disaggregated
