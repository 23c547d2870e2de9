"""The chart's generated files are fresh, and every values file passes the chart's schema.

``hack/generate_chart_files.py`` derives the chart's CRDs, admission-policy template,
``values.schema.json`` and README parameter table from their sources; this regenerates them in
memory and diffs. ``values.yaml`` and each ``ci/*-values.yaml`` (merged over the defaults, as
Helm does) must validate against the schema, and typical mistakes must not.
"""

from __future__ import annotations

import copy
import difflib
import importlib.util
import json
import pathlib
import sys
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "deepseek-operator"


def _load_generator() -> Any:
    spec = importlib.util.spec_from_file_location(
        "generate_chart_files", ROOT / "hack" / "generate_chart_files.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


SCHEMA = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())
CI_FILES = sorted((CHART / "ci").glob("*-values.yaml"))


@pytest.mark.parametrize(
    "path", sorted(gen.generated_files()), ids=lambda p: str(p.relative_to(ROOT))
)
def test_generated_file_is_fresh(path: pathlib.Path) -> None:
    expected = gen.generated_files()[path]
    actual = path.read_text() if path.exists() else ""
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                actual.splitlines(True), expected.splitlines(True), "on disk", "generated", n=2
            )
        )
        pytest.fail(f"{path.relative_to(ROOT)} is stale; run `make generate`:\n{diff[:3000]}")


def test_chart_crds_are_exactly_the_top_level_crds() -> None:
    assert gen.stale_crds() == []
    assert sorted(p.name for p in (CHART / "crds").glob("*.yaml")) == sorted(
        p.name for p in (ROOT / "crds").glob("*.yaml")
    )


def test_schema_is_a_valid_draft7_schema() -> None:
    jsonschema.Draft7Validator.check_schema(SCHEMA)


def test_default_values_validate() -> None:
    jsonschema.Draft7Validator(SCHEMA).validate(DEFAULTS)


def test_there_are_ci_values_files() -> None:
    assert len(CI_FILES) >= 2


@pytest.mark.parametrize("path", CI_FILES, ids=lambda p: p.name)
def test_ci_values_validate(path: pathlib.Path) -> None:
    jsonschema.Draft7Validator(SCHEMA).validate(
        _merge(DEFAULTS, yaml.safe_load(path.read_text()) or {})
    )


@pytest.mark.parametrize(
    ("override", "where"),
    [
        pytest.param({"operator": {"replica": 3}}, "replica", id="a misspelt key is rejected"),
        pytest.param({"operator": {"replicas": 0}}, "replicas", id="zero replicas are rejected"),
        pytest.param(
            {"operator": {"replicas": "2"}},
            "replicas",
            id="a string where an integer belongs is rejected",
        ),
        pytest.param(
            {"operator": {"logLevel": "TRACE"}}, "logLevel", id="an unknown log level is rejected"
        ),
        pytest.param({"metrics": {"port": 70000}}, "port", id="a port above 65535 is rejected"),
        pytest.param(
            {"agent": {"enabled": "yes"}},
            "enabled",
            id="a string where a boolean belongs is rejected",
        ),
        pytest.param(
            {"image": {"pullPolicy": "Sometimes"}},
            "pullPolicy",
            id="an unknown pull policy is rejected",
        ),
    ],
)
def test_schema_rejects_mistakes(override: dict[str, Any], where: str) -> None:
    errors = list(jsonschema.Draft7Validator(SCHEMA).iter_errors(_merge(DEFAULTS, override)))
    assert errors, f"{override} was accepted"
    assert any(where in (e.message + "/".join(map(str, e.path))) for e in errors)


def test_every_value_has_a_description() -> None:
    params = gen.parse_params((CHART / "values.yaml").read_text())
    assert params and all(p["description"] for p in params)
    assert len({p["path"] for p in params}) == len(params), "a @param is documented twice"


def test_an_undocumented_value_fails_generation() -> None:
    text = (CHART / "values.yaml").read_text() + "\nundocumented: 1\n"
    with pytest.raises(gen.GenerateError, match="undocumented"):
        gen.values_schema(text)


def test_admission_policy_template_keeps_the_plain_manifests_rules() -> None:
    plain = (ROOT / "deploy" / "agent-admission-policy.yaml").read_text()
    chart = gen.admission_policy_template()
    # Every CEL line of the plain manifest is in the chart's copy unchanged.
    for line in plain[plain.index("apiVersion:") :].splitlines():
        if "expression" in line or "variables." in line:
            assert line in chart
    assert gen.POLICY_USER not in chart and gen.POLICY_NAME not in chart
