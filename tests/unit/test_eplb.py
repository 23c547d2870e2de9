"""EPLB redundant experts set through extraArgs: how they are read, which spellings admission
takes, and where the decision uses them (vLLM's agreement: `make conformance`)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from deepseek_operator.api.extra_args.eplb import (
    DOTTED_FORM,
    EPLB_CONFIG_FLAG,
    JSON_FORM,
    canonical_redundant_experts_arg,
    redundant_experts,
)
from deepseek_operator.api.load import SpecError
from deepseek_operator.catalog.vllm import supported_releases, vllm_release
from deepseek_operator.engine.decision import resolve
from tests.unit.factories import gb200_pool, spec


@pytest.mark.parametrize(
    ("args", "count"),
    [
        pytest.param([], 0, id="unset"),
        pytest.param(["--eplb-config.num_redundant_experts=8"], 8, id="dotted"),
        pytest.param(['--eplb-config={"num_redundant_experts": 4}'], 4, id="json ="),
        pytest.param(["--eplb-config", '{"a": 1, "num_redundant_experts": 2}'], 2, id="next arg"),
        pytest.param(
            ['--eplb-config={"num_redundant_experts": 4}', '--eplb-config={"window_size": 9}'],
            0,
            id="a later config replaces the whole config",
        ),
        pytest.param(
            ['--eplb-config={"num_redundant_experts": 4}', '--eplb={"window_size": 9}'],
            0,
            id="an abbreviated later config replaces it too",
        ),
        pytest.param(
            ["--eplb-config.num_redundant_experts=4", '--eplb_config={"window_size": 9}'],
            4,
            id="dotted keys are appended last and win",
        ),
        pytest.param(
            ['--eplb-config={"num_redundant_experts": 4}', "--eplb-config.window_size=9"],
            0,
            id="a dotted key without it resets it",
        ),
        pytest.param(
            ["--eplb-config.window_size=9", "--eplb-config.num_redundant_experts=6"],
            6,
            id="dotted keys merge",
        ),
        pytest.param(
            ["--kernel-config", '{"num_redundant_experts": 4}'], 0, id="another flag's value"
        ),
        pytest.param(["--eplb-config", "{not json"], 0, id="vLLM refuses the argv at start"),
    ],
)
def test_redundant_experts_are_read_as_vllms_parser_reads_them(args: list[str], count: int) -> None:
    assert redundant_experts(args) == count


def test_only_eplb_config_starts_with_the_shortest_abbreviation_in_every_release() -> None:
    for release in supported_releases():
        options = vllm_release(release).serve_options
        assert [o for o in options if o.startswith("--ep")] == [EPLB_CONFIG_FLAG], release


@pytest.mark.parametrize(
    ("arg", "allowed"),
    [
        ("--eplb-config.num_redundant_experts=8", True),
        ('--eplb-config={"num_redundant_experts": 8, "window_size": 10}', True),
        ('{"window_size": 10, "num_redundant_experts": 0}', True),
        ("--enable-return-routed-experts", True),  # no redundant experts at all
        ('--eplb-config={"num_redundant_experts": "8"}', False),
        ('--eplb-config={"num_redundant_experts": 8.0}', False),
        ('--eplb-config={"num_redundant_experts": true}', False),
        ("--eplb-config.num_redundant_experts=1k", False),
        ("--eplb-config.num_redundant_experts=08", False),
        ("--eplb-config.num_redundant_experts", False),  # value as the next argument
        ("--eplb_config.num_redundant_experts=8", False),
        ('--eplb-conf={"num_redundant_experts": 8}', False),
        ('{"num_redundant_experts": 8, "num_redundant_experts": 9}', False),
        ('{"num_redundant_experts": 8, "policy": {"x": 1}}', False),
        ("--eplb-config.num_redundant_experts=8\n", False),
    ],
)
def test_admission_takes_only_the_canonical_spellings(arg: str, allowed: bool) -> None:
    assert canonical_redundant_experts_arg(arg) is allowed
    # The CEL rule uses the same patterns (RE2 and Python read them alike).
    if allowed and "redundant" in arg:
        assert re.match(DOTTED_FORM, arg) or re.match(JSON_FORM, arg)


def test_a_non_canonical_spelling_is_refused_naming_the_field_value_and_rule() -> None:
    with pytest.raises(SpecError) as caught:
        spec(engine={"extraArgs": ['--eplb-config={"num_redundant_experts": "4"}']})
    message = str(caught.value)
    assert message.startswith("spec.engine.extraArgs: Invalid value:")
    assert '"--eplb-config={\\"num_redundant_experts\\": \\"4\\"}"' in message
    assert "--eplb-config.num_redundant_experts=N" in message


# DeepSeek-V4.1-Flash has 384 routed experts.
def _eplb(backend: str, tp: int, redundant: int, release: str = "0.33.0", **more: Any) -> Any:
    return spec(
        moeBackend=backend,
        vllmVersion=release,
        parallelism={"tensorParallelSize": tp, "expertParallel": True, **more},
        engine={"extraArgs": [f"--eplb-config.num_redundant_experts={redundant}"]},
    )


def test_redundant_experts_without_eplb_cannot_run() -> None:
    res = resolve(_eplb("triton", 4, 4), gb200_pool())
    assert not res.backend_runnable
    assert res.reason == "EPLBSettingsFailed"
    assert "num_redundant_experts=4" in res.message
    assert "spec.parallelism.enableEplb is false" in res.message


def test_megamoe_divides_routed_plus_redundant_experts_over_the_ep_group() -> None:
    ok = resolve(_eplb("deep_gemm_mega_moe", 4, 4, enableEplb=True), gb200_pool())
    assert ok.backend_runnable, ok.message
    bad = resolve(_eplb("deep_gemm_mega_moe", 4, 2, enableEplb=True), gb200_pool())
    assert not bad.backend_runnable
    assert bad.reason == "DimensionsFailed"
    assert "n_physical_experts=386 must be divisible by ep_size=4" in bad.message


def test_auto_keeps_the_fused_path_whose_eplb_needs_an_even_split() -> None:
    res = resolve(_eplb("auto", 4, 2, enableEplb=True), gb200_pool())
    assert res.moe_backend == "auto" and not res.backend_runnable
    assert res.reason == "FusedMoEExpertsFailed"
    assert "Got 386 experts and 4 EP ranks" in res.message
    assert resolve(_eplb("auto", 4, 4, enableEplb=True), gb200_pool()).backend_runnable


@pytest.mark.parametrize(
    ("release", "runs"), [("0.30.0", False), ("0.31.0", True), ("0.33.0", True)]
)
def test_the_fused_path_of_0_30_divides_the_experts_by_tp(release: str, runs: bool) -> None:
    res = resolve(_eplb("triton", 5, 0, release), gb200_pool())
    assert res.backend_runnable is runs
    if not runs:
        assert "n_physical_experts=384 must be divisible by tp_size=5" in res.message
