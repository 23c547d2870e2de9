"""The static rules of ``spec.disaggregation``: CEL in the CRD, the same predicate offline.

Three families, all with the API server's words (:class:`~.rule.SpecRule`):

* the connector (only NixlConnector is modelled); the schema itself keeps one role per kind
  (the list is keyed by ``role``: two items of a two-value enum);
* aggregated-only fields (``replicas``, ``moeBackend``, ``parallelism``, ``resources``, the
  per-role engine flags) left at their defaults when ``disaggregation`` is set, since the roles
  say them; defaults are filled in before CEL runs, so "unset" reads "at its default";
* role extraArgs that would change a factor of vLLM's NIXL compatibility hash: the pools would
  refuse each other at the handshake, after both had loaded their weights.

The rules of the aggregated spec that a role's fields share (moeBackend, parallelism, extraArgs)
run on each role too: their CEL is attached to the role's schema nodes (api/crd.py) and
:func:`.check.check_roles` runs their predicates on each role's projected spec.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from deepseek_operator.api.extra_args.owned_flags import SERVE_OPTIONS
from deepseek_operator.api.roles import NIXL_CONNECTOR
from deepseek_operator.api.rules.rule import (
    NORMALIZED_BACKEND_CEL,
    SpecRule,
    cel_no_gpu_resource,
    cel_set,
    sets_gpu_resource,
)
from deepseek_operator.api.sections import EngineSpec, ParallelismSpec

if TYPE_CHECKING:
    from deepseek_operator.api.spec import DeepSeekServingSpec

# What vLLM's compute_nixl_compatibility_hash reads that a flag can change: the model, its
# revision and dtype, the model config (layers, KV heads, head size via --hf-overrides), the
# attention backend, the KV-cache dtype, the hybrid KV-cache manager, speculative decoding; and
# --kv-transfer-config, which the operator renders per role.
HASHED_DESTS = frozenset(
    {
        "model",
        "revision",
        "dtype",
        "hf_overrides",
        "attention_backend",
        "attention_config",
        "kv_cache_dtype",
        "kv_cache_dtype_skip_layers",
        "disable_hybrid_kv_cache_manager",
        "speculative_config",
        "spec_model",
        "kv_transfer_config",
    }
)
# vLLM refuses --enable-return-routed-experts with the Nixl, Mooncake and MoRIIO connectors.
REFUSED_WITH_NIXL_DESTS = frozenset({"enable_return_routed_experts"})
HASHED_FLAGS: tuple[str, ...] = tuple(
    sorted(o for o, d in SERVE_OPTIONS.items() if d in HASHED_DESTS)
)
SHARED_REFUSED_FLAGS: tuple[str, ...] = tuple(
    sorted(
        o
        for o, d in SERVE_OPTIONS.items()
        if d in {"kv_transfer_config"}
        or (d in REFUSED_WITH_NIXL_DESTS and o.startswith("--enable"))
    )
)
ROLE_REFUSED_FLAGS = tuple(sorted({*HASHED_FLAGS, *SHARED_REFUSED_FLAGS}))

# An item's option as vLLM's parser names it: '_' read as '-', '=value' and a dotted key dropped.
_CEL_KEY = "a.split('=')[0].split('.')[0].replace('_', '-')"


def _key(arg: str) -> str:
    return arg.split("=")[0].split(".")[0].replace("_", "-")


def _first(args: list[str], flags: tuple[str, ...]) -> int | None:
    return next((i for i, a in enumerate(args) if _key(a) in flags), None)


def _role_index(spec: DeepSeekServingSpec, bad: Callable[[Any], bool]) -> int:
    """Index of the first role for which ``bad(role)`` holds (-1: none)."""
    d = spec.disaggregation
    return next((i for i, r in enumerate(d.roles) if bad(r)), -1) if d else -1


def _defaults_cel(prefix: str, model: type[Any], fields: tuple[str, ...] | None = None) -> str:
    """CEL: every field of ``model`` under ``prefix`` absent or at its default."""
    parts = []
    for name, info in model.model_fields.items():
        alias = info.alias or name
        if fields is not None and alias not in fields:
            continue
        ref = f"{prefix}.{alias}"
        default = info.get_default(call_default_factory=True)
        if default is None:
            parts.append(f"!has({ref})")
        elif isinstance(default, bool):
            parts.append(f"(!has({ref}) || {ref} == {str(default).lower()})")
        elif isinstance(default, int | float):
            parts.append(f"(!has({ref}) || {ref} == {default})")
        else:
            parts.append(f"(!has({ref}) || {ref} == '{default}')")
    return " && ".join(parts)


_ROLE_ENGINE_FIELDS = (
    "maxNumSeqs",
    "maxNumBatchedTokens",
    "gpuMemoryUtilization",
    "enableDbo",
    "ubatchSize",
)
_ROLE_ENGINE_ATTRS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "enable_dbo",
    "ubatch_size",
)


def _aggregated(
    name: str,
    field: str,
    unset_cel: str,
    unset: Callable[[DeepSeekServingSpec], bool],
    value: Callable[[DeepSeekServingSpec], Any],
    role_field: str,
) -> SpecRule:
    return SpecRule(
        name=name,
        scope="spec",
        field_path=f".{field}",
        cel=f"!has(self.disaggregation) || ({unset_cel})",
        message=(
            f"spec.{field} must stay unset with spec.disaggregation: each role sets its own "
            f"(spec.disaggregation.roles[].{role_field})"
        ),
        holds=lambda s: s.disaggregation is None or unset(s),
        value=value,
    )


_ENGINE_DEFAULTS = EngineSpec()


def _engine_at_default(attr: str) -> Callable[[DeepSeekServingSpec], bool]:
    return lambda s: bool(getattr(s.engine, attr) == getattr(_ENGINE_DEFAULTS, attr))


def _engine_value(attr: str) -> Callable[[DeepSeekServingSpec], Any]:
    return lambda s: getattr(s.engine, attr)


AGGREGATED_ONLY_RULES: tuple[SpecRule, ...] = (
    _aggregated(
        "ReplicasPerRole",
        "replicas",
        "self.replicas == 1",
        lambda s: s.replicas == 1,
        lambda s: s.replicas,
        "replicas",
    ),
    _aggregated(
        "MoEBackendPerRole",
        "moeBackend",
        f"{NORMALIZED_BACKEND_CEL} == 'auto'",
        lambda s: s.moe_backend == "auto",
        lambda s: s.moe_backend_as_written,
        "moeBackend",
    ),
    _aggregated(
        "ParallelismPerRole",
        "parallelism",
        "!has(self.parallelism) || (" + _defaults_cel("self.parallelism", ParallelismSpec) + ")",
        lambda s: s.parallelism == ParallelismSpec(),
        lambda s: s.parallelism.model_dump(by_alias=True, exclude_defaults=True),
        "parallelism",
    ),
    _aggregated(
        "ResourcesPerRole",
        "resources",
        "!has(self.resources) || ((!has(self.resources.requests) || size(self.resources.requests) == 0)"
        " && (!has(self.resources.limits) || size(self.resources.limits) == 0))",
        lambda s: not s.resources.requests and not s.resources.limits,
        lambda s: s.resources.model_dump(by_alias=True),
        "resources",
    ),
    *(
        _aggregated(
            f"Engine{field[0].upper()}{field[1:]}PerRole",
            f"engine.{field}",
            "!has(self.engine) || (" + _defaults_cel("self.engine", EngineSpec, (field,)) + ")",
            _engine_at_default(attr),
            _engine_value(attr),
            f"engine.{field}",
        )
        for field, attr in zip(_ROLE_ENGINE_FIELDS, _ROLE_ENGINE_ATTRS, strict=True)
    ),
)
"""The aggregated-only fields, each refused with disaggregation unless at its default."""


DISAGGREGATION_RULES: tuple[SpecRule, ...] = (
    SpecRule(
        name="KVConnectorModelled",
        scope="spec.disaggregation",
        field_path=".kvConnector",
        cel=f"!has(self.kvConnector) || self.kvConnector == '{NIXL_CONNECTOR}'",
        message=(
            f"spec.disaggregation.kvConnector must be {NIXL_CONNECTOR}: it is the only KV "
            "connector whose compatibility hash, side channel and roles the operator models "
            "(MooncakeConnector, LMCacheConnectorV1, P2pNcclConnector, MoRIIOConnector and the "
            "others are refused until they are)"
        ),
        holds=lambda s: s.disaggregation is None or s.disaggregation.kv_connector == NIXL_CONNECTOR,
        value=lambda s: s.disaggregation.kv_connector if s.disaggregation else None,
    ),
    SpecRule(
        name="RoleGPUResourceIsDerived",
        scope="spec",
        field_path=".disaggregation.roles",
        cel=(
            "!has(self.disaggregation) || self.disaggregation.roles.all(r, !has(r.resources) || ("
            f"{cel_no_gpu_resource('r.resources')}))"
        ),
        message=(
            "spec.disaggregation.roles[].resources must not set the GPU resource "
            "(spec.gpuResourceName): the operator derives each role's GPU limit from its "
            "parallelism (TP x PP x local DP x PCP)"
        ),
        holds=lambda s: _role_index(s, lambda r: sets_gpu_resource(s, r.resources)) < 0,
        value=lambda s: s.gpu_resource_name,
    ),
    SpecRule(
        name="SharedExtraArgsLeaveKVTransferToTheOperator",
        scope="spec",
        field_path=".engine.extraArgs",
        cel=(
            "!has(self.disaggregation) || !has(self.engine) || !has(self.engine.extraArgs) || "
            f"self.engine.extraArgs.all(a, !({_CEL_KEY} in {cel_set(SHARED_REFUSED_FLAGS)}))"
        ),
        message=(
            "spec.engine.extraArgs must not set --kv-transfer-config or "
            "--enable-return-routed-experts with spec.disaggregation: the operator renders each "
            "role's KV transfer config, and vLLM refuses routed-expert return with NixlConnector"
        ),
        holds=lambda s: (
            s.disaggregation is None
            or _first(list(s.engine.extra_args), SHARED_REFUSED_FLAGS) is None
        ),
        value=lambda s: s.engine.extra_args[
            _first(list(s.engine.extra_args), SHARED_REFUSED_FLAGS) or 0
        ],
    ),
    SpecRule(
        name="RoleExtraArgsKeepHashedFactors",
        scope="spec.disaggregation.roles.engine",
        field_path=".extraArgs",
        cel=(
            "!has(self.extraArgs) || "
            f"self.extraArgs.all(a, !({_CEL_KEY} in {cel_set(ROLE_REFUSED_FLAGS)}))"
        ),
        message=(
            "spec.disaggregation.roles[].engine.extraArgs must not set what vLLM's NIXL "
            "compatibility hash covers (model, revision, dtype, --hf-overrides, attention "
            "backend, KV-cache dtype, hybrid KV-cache manager, speculative decoding) nor "
            "--kv-transfer-config or --enable-return-routed-experts: a prefill and a decode "
            "pool that hash differently refuse each other after loading their weights; set it "
            "once in the shared spec"
        ),
        holds=lambda s: (
            _role_index(
                s, lambda r: _first(list(r.engine.extra_args), ROLE_REFUSED_FLAGS) is not None
            )
            < 0
        ),
        value=lambda s: _role_bad_arg(s),
        path_of=lambda s: (
            f"spec.disaggregation.roles[{_role_index(s, lambda r: _first(list(r.engine.extra_args), ROLE_REFUSED_FLAGS) is not None)}].engine.extraArgs"
        ),
    ),
)


def _role_bad_arg(spec: DeepSeekServingSpec) -> str | None:
    for role in spec.disaggregation.roles if spec.disaggregation else ():
        index = _first(list(role.engine.extra_args), ROLE_REFUSED_FLAGS)
        if index is not None:
            return role.engine.extra_args[index]
    return None
