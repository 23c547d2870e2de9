"""Offline admission (api/admission.py): what the API server would refuse, refused alike.

The verdicts are compared with the real API server in
``tests/integration/test_admission_parity.py``; here the cases that issue 11 found, and the
property that no hostile spec makes ``parse_serving`` raise anything but a SpecError.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from deepseek_operator.api.load import parse_serving
from deepseek_operator.errors import SpecError
from tests.hostile_specs import SEED, hostile


def seed(**spec: Any) -> dict[str, Any]:
    doc = copy.deepcopy(SEED)
    doc["spec"].update(spec)
    return doc


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        pytest.param(seed(replicas="4"), "spec.replicas", id="a numeric string is no integer"),
        pytest.param(
            seed(parallelism={"expertParallel": "true"}),
            "spec.parallelism.expertParallel",
            id="a boolean string is no boolean",
        ),
        pytest.param(seed(image=1.5), "spec.image", id="a float is no string"),
        pytest.param(seed(replicas=2**63), "spec.replicas", id="2**63 is out of range"),
        pytest.param(seed(replicas=2**31), "spec.replicas", id="2**31 is out of range"),
        pytest.param(
            {**seed(), "extra": 1}, "extra", id="an unknown top-level key is an unknown field"
        ),
        pytest.param({**seed(), "metadata": {"name": "Upper"}}, "metadata.name", id="invalid name"),
        pytest.param(
            {**seed(), "metadata": {"name": "x" * 41}}, "metadata.name", id="name too long"
        ),
        pytest.param(
            {**seed(), "metadata": {"name": "a", "uid2": "x"}},
            "metadata.uid2",
            id="unknown metadata field",
        ),
        pytest.param(
            seed(parallelism={"tensorParallelSize": 1024, "dataParallelSize": 1024}),
            "spec.parallelism.dataParallelSize",
            id="GPUs per replica overflow",
        ),
    ],
)
def test_the_api_servers_refusals_are_refused_offline(doc: dict[str, Any], path: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_serving(doc)
    assert caught.value.field_path == path, str(caught.value)


def test_nulls_are_dropped_and_defaults_filled_as_server_side_apply_does() -> None:
    obj = parse_serving(seed(replicas=None, moeBackend=None, parallelism={"tensorParallelSize": 4}))
    assert obj.spec.replicas == 1 and obj.spec.moe_backend == "auto"
    assert obj.spec.parallelism.pipeline_parallel_size == 1


def test_an_integral_float_is_the_integer_kubectl_sends() -> None:
    assert parse_serving(seed(replicas=2.0)).spec.replicas == 2
    with pytest.raises(SpecError):
        parse_serving(seed(replicas=2.5))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=hostile())
def test_no_hostile_spec_raises_anything_but_a_spec_error(doc: dict[str, Any]) -> None:
    try:
        parse_serving(doc)
    except SpecError as exc:
        assert "\n" not in str(exc) and exc.field_path


@pytest.mark.parametrize("name", ["x-api", "x-prefill", "x-decode", "a-b-prefill"])
def test_a_name_ending_in_a_child_suffix_is_refused_so_no_two_servings_names_meet(
    name: str,
) -> None:
    # Serving "x" has the Service "x-api" and, disaggregated, the pools "x-prefill" and
    # "x-decode"; a serving of one of those names would take them (a half pair, or a Service
    # whichever came first keeps).
    doc = {**copy.deepcopy(SEED), "metadata": {"name": name}}
    with pytest.raises(SpecError) as refused:
        parse_serving(doc)
    assert refused.value.field_path == "metadata.name"
    assert "must not end in '-api', '-decode' or '-prefill'" in refused.value.message
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("name", ["api", "x-apis", "x-api1", "prefill", "x-prefills", "decode-x"])
def test_names_that_merely_contain_a_child_suffix_are_admitted(name: str) -> None:
    parse_serving({**copy.deepcopy(SEED), "metadata": {"name": name}})


def test_a_stored_object_of_a_now_reserved_name_is_still_read() -> None:
    # The ending rule is create-only (the CRD's optionalOldSelf transition rule passes every
    # update): a serving created before it keeps being reconciled.
    doc = {**copy.deepcopy(SEED), "metadata": {"name": "x-prefill", "uid": "1234"}}
    assert parse_serving(doc).name == "x-prefill"


@pytest.mark.parametrize(("api_version", "admitted"), [("", True), ("v1", True), ("v2", False)])
def test_an_empty_field_ref_api_version_is_v1_as_the_api_server_defaults_it(
    api_version: str, admitted: bool
) -> None:
    # The API server defaults ObjectFieldSelector.apiVersion "" to v1 and accepts the pod;
    # found by tests/integration/test_core_v1_parity.py.
    field_ref = {"apiVersion": api_version, "fieldPath": "metadata.name"}
    doc = seed(env=[{"name": "POD", "valueFrom": {"fieldRef": field_ref}}])
    if admitted:
        parse_serving(doc)
        return
    with pytest.raises(SpecError) as caught:
        parse_serving(doc)
    assert "spec.env[0].valueFrom.fieldRef.apiVersion" in str(caught.value)


@pytest.mark.parametrize("amount", ["0E", "2E", "1e3", "1E3", "1Ei"])
def test_an_extended_resource_limit_with_a_decimal_suffix_is_admitted(amount: str) -> None:
    # "E" alone is the exa suffix, not an exponent without digits (test_accepted_runs found it:
    # the quantity rule of the limits failed to evaluate on "0E").
    parse_serving(seed(resources={"limits": {"example.com/foo": amount}}))
