"""spec.disaggregation: the roles' schema, the projection each role's decision reads, and the
refusals on roles, with the same words in CEL (offline admission) and in the Python rules."""

from __future__ import annotations

import copy
import pathlib
import re
from typing import Any

import pytest
import yaml

from deepseek_operator.api.crd import build_crd
from deepseek_operator.api.load import parse_serving, parse_spec_types
from deepseek_operator.api.rules.check import SPEC_RULES, check_roles, check_spec
from deepseek_operator.api.rules.disaggregation import HASHED_FLAGS
from deepseek_operator.errors import SpecError

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples/dsv41-flash-1p1d-gb200.yaml"


def _example() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE.read_text())


def _role(obj: dict[str, Any], index: int) -> dict[str, Any]:
    role: dict[str, Any] = obj["spec"]["disaggregation"]["roles"][index]
    return role


def test_the_example_parses_and_each_role_projects_onto_an_aggregated_spec() -> None:
    spec = parse_serving(_example()).spec
    prefill, decode = spec.for_role("prefill"), spec.for_role("decode")
    assert prefill.disaggregation is None and decode.disaggregation is None
    assert prefill.moe_backend == "deep_gemm_mega_moe" and decode.moe_backend == "auto"
    assert (prefill.engine.max_num_batched_tokens, decode.engine.max_num_batched_tokens) == (
        16384,
        1024,
    )
    # Shared extraArgs first, then --enforce-eager, then the role's own.
    assert prefill.engine.extra_args[-2:] == ["--enforce-eager", "--no-async-scheduling"]
    assert "--enforce-eager" not in decode.engine.extra_args
    # What the NIXL hash covers is the shared spec's, in both roles, by construction.
    for field in ("model", "image", "vllm_version"):
        assert getattr(prefill, field) == getattr(decode, field) == getattr(spec, field)
    assert prefill.engine.kv_cache_dtype == decode.engine.kv_cache_dtype == "fp8"


def _with(mutate: Any) -> dict[str, Any]:
    obj = _example()
    mutate(obj)
    return obj


# (id, mutation, refused path, rule whose message it carries)
CASES = [
    (
        "a role's MegaMoE backend without expert parallel is refused at the role",
        lambda o: (
            _role(o, 1)["parallelism"].update(expertParallel=False, dataParallelSize=1)
            or _role(o, 1).update(moeBackend="deep_gemm_mega_moe")
        ),
        "spec.disaggregation.roles[1].moeBackend",
        "MegaMoERequiresExpertParallel",
    ),
    (
        "a role's unknown backend is refused at the role",
        lambda o: _role(o, 0).update(moeBackend="fastest"),
        "spec.disaggregation.roles[0].moeBackend",
        "KnownMoEBackend",
    ),
    (
        "a role's local DP that does not divide its DP is refused at the role",
        lambda o: _role(o, 0)["parallelism"].update(dataParallelSize=4, dataParallelSizeLocal=3),
        "spec.disaggregation.roles[0].parallelism.dataParallelSizeLocal",
        "DataParallelSizeLocalDividesDataParallelSize",
    ),
    (
        "a role's extraArgs may not set a typed flag",
        lambda o: _role(o, 1)["engine"].update(extraArgs=["--tensor-parallel-size", "8"]),
        "spec.disaggregation.roles[1].engine.extraArgs",
        "ExtraArgsDoNotOverrideTypedFields",
    ),
    (
        "a role's extraArgs may not change the attention backend (hashed)",
        lambda o: _role(o, 1)["engine"].update(extraArgs=["--attention-backend", "FLASHMLA"]),
        "spec.disaggregation.roles[1].engine.extraArgs",
        "RoleExtraArgsKeepHashedFactors",
    ),
    (
        "a role's extraArgs may not turn the hybrid KV-cache manager off (hashed)",
        lambda o: _role(o, 0)["engine"].update(extraArgs=["--disable_hybrid_kv_cache_manager"]),
        "spec.disaggregation.roles[0].engine.extraArgs",
        "RoleExtraArgsKeepHashedFactors",
    ),
    (
        "a role's speculative config is hashed: refused with the hashed message, not the typed one",
        lambda o: _role(o, 0)["engine"].update(extraArgs=["--speculative-config.method=mtp"]),
        "spec.disaggregation.roles[0].engine.extraArgs",
        "RoleExtraArgsKeepHashedFactors",
    ),
    (
        "a role's extraArgs may not set an option no release has",
        lambda o: _role(o, 1)["engine"].update(extraArgs=["--no-such-option"]),
        "spec.disaggregation.roles[1].engine.extraArgs[0]",
        "ExtraArgsAreVLLMOptions",
    ),
]


def _message(rule: str) -> str:
    return next(r.message for r in SPEC_RULES if r.name == rule)


@pytest.mark.parametrize(
    ("mutate", "path", "rule"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_role_refusals_name_the_role_field_with_the_rules_message(
    mutate: Any, path: str, rule: str
) -> None:
    obj = _with(mutate)
    with pytest.raises(SpecError) as admitted:
        parse_serving(copy.deepcopy(obj))
    assert (admitted.value.field_path, admitted.value.message) == (path, _message(rule))
    # The Python rules alone (no CEL) refuse it with the same words at the same field.
    with pytest.raises(SpecError) as offline:
        check_roles(check_spec(parse_spec_types(obj["spec"])))
    assert (offline.value.field_path, offline.value.message) == (path, _message(rule))


def test_the_aggregated_spec_is_unaffected_by_the_role_rules() -> None:
    obj = yaml.safe_load((ROOT / "examples/dsv41-flash-gb200.yaml").read_text())
    assert parse_serving(obj).spec.disaggregation is None


def test_hashed_flags_cover_every_spelling_of_the_hashed_options() -> None:
    for flag in ("--dtype", "--attention-backend", "--kv-cache-dtype", "--speculative-config"):
        assert flag in HASHED_FLAGS
    assert "-sc" in HASHED_FLAGS  # the short spelling of --speculative-config
    assert "--moe-backend" not in HASHED_FLAGS  # not in the hash: roles may differ


def _fields(node: dict[str, Any]) -> set[str]:
    return set(node.get("properties", {}))


def test_role_rules_read_only_fields_the_role_nodes_have() -> None:
    # The API server type-checks each rule against its node: a rule reading an absent field
    # would make it refuse the whole CRD.
    spec = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    role = spec["properties"]["disaggregation"]["properties"]["roles"]["items"]
    for node in (role, role["properties"]["parallelism"], role["properties"]["engine"]):
        for validation in node["x-kubernetes-validations"]:
            used = set(re.findall(r"self\.([A-Za-z]+)", validation["rule"]))
            assert used <= _fields(node), (validation["message"], used - _fields(node))
