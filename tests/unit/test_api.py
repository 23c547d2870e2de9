"""The API: generated CRD, structural schema, descriptions, and the static rules' messages."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import yaml

from deepseek_operator.api.crd import build_crd, crd_yaml
from deepseek_operator.api.extra_args.owned_flags import (
    MODEL_CONFIG_KEYS,
    OWNED_FLAGS,
    UNOWNED_PREFIX_FLAGS,
)
from deepseek_operator.api.load import parse_serving, parse_spec
from deepseek_operator.api.rules.check import SPEC_RULES
from deepseek_operator.api.rules.cross_field import VLLM_MEGA_MOE_REQUIRES_EP
from deepseek_operator.errors import SpecError
from deepseek_operator.names import CRD_FILENAME

ROOT = pathlib.Path(__file__).resolve().parents[2]
INVALID = sorted((ROOT / "tests/fixtures/invalid").glob("*.yaml"))


def test_checked_in_crd_matches_the_generator() -> None:
    checked_in = (ROOT / "crds" / CRD_FILENAME).read_text()
    assert checked_in == crd_yaml(), "crds/ is stale: run `make generate`"


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        out.append((path, node))
        for key, value in node.get("properties", {}).items():
            out += _walk(value, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            out += _walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            out += _walk(node["additionalProperties"], f"{path}{{}}")
    return out


def _schema() -> dict[str, Any]:
    return build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_schema_is_structural() -> None:
    text = crd_yaml()
    assert "$ref" not in text
    assert "additionalProperties: false" not in text
    for path, node in _walk(_schema()):
        assert "anyOf" not in node, path
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"


# The JSON names of apiextensions.k8s.io/v1 JSONSchemaProps: the API server silently drops any
# other key from a CRD's schema, so a rule written with one would be enforced offline only.
_KEYS_THE_API_SERVER_KEEPS = frozenset(
    [
        "id",
        "$schema",
        "$ref",
        "description",
        "type",
        "format",
        "title",
        "default",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "multipleOf",
        "enum",
        "maxProperties",
        "minProperties",
        "required",
        "items",
        "allOf",
        "oneOf",
        "anyOf",
        "not",
        "properties",
        "additionalProperties",
        "patternProperties",
        "dependencies",
        "additionalItems",
        "definitions",
        "externalDocs",
        "example",
        "nullable",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-int-or-string",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-list-type",
        "x-kubernetes-map-type",
        "x-kubernetes-validations",
    ]
)


def test_schema_uses_only_keys_the_api_server_keeps() -> None:
    for path, node in _walk(_schema()):
        unknown = set(node) - _KEYS_THE_API_SERVER_KEEPS
        assert not unknown, f"{path or '.'} uses {sorted(unknown)}, which the API server drops"


def test_every_spec_and_status_field_has_a_description() -> None:
    root = _schema()
    for top in ("spec", "status"):
        for path, node in _walk(root["properties"][top], top):
            if path.endswith("[]") or path.endswith("{}") or path == top:
                continue
            assert node.get("description"), f"{path} has no description"


def test_crd_names_columns_and_subresource() -> None:
    crd = build_crd()
    names = crd["spec"]["names"]
    assert names["shortNames"] == ["dss"]
    assert crd["spec"]["group"] == "serving.deepseek-operator.io"
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1"
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Backend"] == ".status.resolved.moeBackend"
    assert columns["SP"] == ".status.resolved.sequenceParallel"
    assert "Ready" in columns and "Age" in columns and "Reason" in columns
    conditions = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"][
        "conditions"
    ]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


def test_every_rule_is_a_cel_validation_with_the_same_message() -> None:
    spec = _schema()["properties"]["spec"]
    nodes = {
        "spec": spec,
        "spec.parallelism": spec["properties"]["parallelism"],
        "spec.engine": spec["properties"]["engine"],
        "spec.model": spec["properties"]["model"],
        "spec.engine.extraArgs": spec["properties"]["engine"]["properties"]["extraArgs"]["items"],
        "spec.disaggregation": spec["properties"]["disaggregation"],
    }
    attached = sorted(
        (scope, v["rule"], v["message"], v.get("fieldPath"))
        for scope, node in nodes.items()
        for v in node["x-kubernetes-validations"]
    )
    # A role's engine node also carries the aggregated extraArgs rules (test_disaggregation_api).
    role = spec["properties"]["disaggregation"]["properties"]["roles"]["items"]
    own = {r.cel for r in SPEC_RULES if r.scope == "spec.disaggregation.roles.engine"}
    attached = sorted(
        attached
        + [
            ("spec.disaggregation.roles.engine", v["rule"], v["message"], v.get("fieldPath"))
            for v in role["properties"]["engine"]["x-kubernetes-validations"]
            if v["rule"] in own
        ]
    )
    # Every rule's whole CEL expression, at the schema node it runs on, with its message.
    expected = sorted((r.scope, r.cel, r.message, r.field_path or None) for r in SPEC_RULES)
    assert attached == expected


def _expected_path(path: pathlib.Path) -> str | None:
    """A ``# path:`` second line: where a rule on a role's node names the refusal."""
    second = path.read_text().splitlines()[1]
    return second.removeprefix("# path: ").strip() if second.startswith("# path: ") else None


def _expected_rule(path: pathlib.Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# rule: ")
    return first.removeprefix("# rule: ").strip()


@pytest.mark.parametrize("path", INVALID, ids=lambda p: f"{p.stem} is refused")
def test_invalid_fixtures_are_refused_with_the_rules_message(path: pathlib.Path) -> None:
    rule = next(r for r in SPEC_RULES if r.name == _expected_rule(path))
    with pytest.raises(SpecError) as caught:
        parse_serving(yaml.safe_load(path.read_text()))
    assert caught.value.message == rule.message
    expected = _expected_path(path)
    if expected is not None:
        assert caught.value.field_path == expected
        return
    # A per-item rule names the item: spec.engine.extraArgs[0].
    assert caught.value.field_path == rule.full_path + ("[0]" if rule.per_item else "")
    assert rule.full_path in str(caught.value)


def test_every_rule_has_an_invalid_fixture() -> None:
    covered = {_expected_rule(p) for p in INVALID}
    assert covered == {r.name for r in SPEC_RULES}


def test_mega_without_ep_carries_vllms_own_words() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({"model": {"name": "m"}, "image": "i", "moeBackend": "deep_gemm_mega_moe"})
    assert VLLM_MEGA_MOE_REQUIRES_EP in str(caught.value)
    assert str(caught.value).startswith('spec.moeBackend: Invalid value: "deep_gemm_mega_moe"')


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        pytest.param({"image": "i"}, "spec.model", id="missing model names the field"),
        pytest.param(
            {"model": {"name": "m"}, "image": "i", "replicas": -1},
            "spec.replicas",
            id="negative replicas",
        ),
        pytest.param(
            {"model": {"name": "m"}, "image": "i", "parallelism": {"tensorParallelSize": 0}},
            "spec.parallelism.tensorParallelSize",
            id="zero TP",
        ),
        pytest.param(
            {"model": {"name": "m"}, "image": "i", "parallelism": {"tensorParalelSize": 4}},
            "spec.parallelism.tensorParalelSize",
            id="typo is an unknown field",
        ),
        pytest.param(
            {"model": {"name": "m", "expertDtype": "int4"}, "image": "i"},
            "spec.model.expertDtype",
            id="bad enum value",
        ),
    ],
)
def test_type_and_range_errors_name_the_field(raw: dict[str, Any], path: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(raw)
    assert caught.value.field_path == path
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "written", ["DEEP-GEMM-MEGA-MOE", "Deep_Gemm-Mega_MoE", "deep_gemm_mega_moe"]
)
def test_moe_backend_is_normalised_once_at_the_api_boundary(written: str) -> None:
    spec = parse_spec(
        {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash"},
            "image": "img",
            "moeBackend": written,
            "parallelism": {"expertParallel": True},
        }
    )
    # Everything downstream reads the normalised value; the user's spelling stays for messages.
    assert spec.moe_backend == "deep_gemm_mega_moe"
    assert spec.moe_backend_as_written == written


def test_refusal_quotes_the_backend_as_the_user_wrote_it() -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({"model": {"name": "m"}, "image": "img", "moeBackend": "Deep-Gemm-Mega-MoE"})
    assert err.value.value == "Deep-Gemm-Mega-MoE"
    assert err.value.field_path == "spec.moeBackend"


def _prefixes(flag: str) -> list[str]:
    return [flag[:i] for i in range(1, len(flag) + 1)]


@pytest.mark.parametrize(
    "flag", [f for f in OWNED_FLAGS if "." not in f], ids=lambda f: f"every prefix of {f}"
)
def test_every_abbreviation_of_an_owned_flag_is_refused_in_extra_args(flag: str) -> None:
    # argparse expands any unambiguous prefix; vLLM also reads '_' as '-'. A prefix that is a
    # vLLM flag in its own right (e.g. --tokenizer) is that flag, not an abbreviation.
    for prefix in _prefixes(flag):
        if prefix in UNOWNED_PREFIX_FLAGS:
            continue
        spellings = {prefix, f"{prefix}=8"}
        if prefix.startswith("--"):
            spellings.add("--" + prefix[2:].replace("-", "_"))
        for arg in sorted(spellings):
            spec = {"model": {"name": "m"}, "image": "i", "engine": {"extraArgs": [arg]}}
            with pytest.raises(SpecError, match="extraArgs must not set a flag"):
                parse_spec(spec)


@pytest.mark.parametrize(
    "args",
    [
        ["--language-model-only"],
        ["--tokenizer=deepseek-ai/x"],
        ['--kernel-config={"a":1}'],
        ["--seed", "-1"],
        ["--tokenizer", "x"],
    ],
)
def test_flags_of_their_own_pass_extra_args(args: list[str]) -> None:
    parse_spec({"model": {"name": "m"}, "image": "i", "engine": {"extraArgs": args}})


def _hf_override_spellings(key: str) -> list[list[str]]:
    """Every way vLLM's parser lets --hf-overrides (or an abbreviation of it) set ``key``."""
    flat, nested = f'{{"{key}": 1}}', f'{{"text_config": {{"{key}": 1}}}}'
    return [
        [f"--hf-overrides={flat}"],
        ["--hf-overrides", flat],
        ["--hf_overrides", nested],
        [f"--hf-over={nested}"],
        [f"--hf-overrides.{key}", "1"],
        [f"--hf-overrides.{key}=1"],
        [f"--hf-overrides.text_config.{key}=1"],
    ]


@pytest.mark.parametrize(
    ("key", "field"), MODEL_CONFIG_KEYS, ids=[f"--hf-overrides {k}" for k, _ in MODEL_CONFIG_KEYS]
)
def test_hf_overrides_of_a_model_config_key_the_decision_reads_are_refused(
    key: str, field: str
) -> None:
    rule = next(r for r in SPEC_RULES if r.name == "ExtraArgsDoNotOverrideModelConfig")
    assert f"{key}" in rule.message and field in rule.message
    for args in _hf_override_spellings(key):
        spec = {"model": {"name": "m"}, "image": "i", "engine": {"extraArgs": args}}
        with pytest.raises(SpecError) as caught:
            parse_spec(spec)
        assert caught.value.message == rule.message, args
        assert caught.value.field_path == "spec.engine.extraArgs"


def test_every_model_fact_from_the_hf_config_is_guarded_against_hf_overrides() -> None:
    # A new fact the decision reads from the model config must join MODEL_CONFIG_KEYS.
    from deepseek_operator.engine.model_facts import _FACT_FIELDS

    guarded = {field.removeprefix("spec.model.") for _, field in MODEL_CONFIG_KEYS}
    not_in_hf_config = {"vram_minimum_gb"}  # the vLLM recipe's figure, not a config.json key
    for fact in _FACT_FIELDS:
        camel = fact.split("_")[0] + "".join(w.title() for w in fact.split("_")[1:])
        assert camel in guarded or fact in not_in_hf_config, fact


@pytest.mark.parametrize(
    "args",
    [
        ['--hf-overrides={"max_position_embeddings": 65536}'],
        ["--hf-overrides.rope_theta", "50000"],
        ["--hf-token=x"],
    ],
)
def test_hf_overrides_of_other_keys_pass(args: list[str]) -> None:
    parse_spec({"model": {"name": "m"}, "image": "i", "engine": {"extraArgs": args}})
