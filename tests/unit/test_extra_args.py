"""extraArgs read as vLLM's parser reads them: admission (the union of releases) and the decision's
per-release check with the nearest name."""

from __future__ import annotations

import pytest

from deepseek_operator.api.extra_args import parser
from deepseek_operator.api.load import parse_spec
from deepseek_operator.catalog.vllm import vllm_release
from deepseek_operator.engine.decision import resolve
from deepseek_operator.errors import SpecError
from tests.unit.factories import gb200_pool, spec

ONLY_NEWER = sorted(
    set(vllm_release("0.33.0").serve_options) - set(vllm_release("0.30.0").serve_options)
)


@pytest.mark.parametrize(
    "args",
    [
        ["--MOE-BACKEND=triton"],
        ["-tp8"],
        ["--max-log-len 8"],
        ["--enforce-eager\n"],
        ["--enforce-eag"],
        ["--enforce-eager=1"],
        ["-a"],
        ["---x"],
    ],
)
def test_options_no_release_reads_are_refused_at_their_index(args: list[str]) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(
            {"model": {"name": "m"}, "image": "i", "engine": {"extraArgs": ["--seed", "1", *args]}}
        )
    assert caught.value.field_path == "spec.engine.extraArgs[2]"
    assert caught.value.message == parser.TEXTS.option


@pytest.mark.parametrize(
    "args",
    [
        ["; rm -rf /"],
        ["--enforce-eager", "x"],
        ["--seed", "1", "2"],
        ["-O3", "5"],
        ["--seed=1", "2"],
    ],
)
def test_values_no_option_takes_are_refused(args: list[str]) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({"model": {"name": "m"}, "image": "i", "engine": {"extraArgs": args}})
    assert caught.value.field_path == "spec.engine.extraArgs"
    assert caught.value.message == parser.VALUES_MESSAGE


@pytest.mark.parametrize(
    "args",
    [
        ["--enforce_eager", "--no-enable-log-requests"],
        ["--seed", "-1", "--cudagraph-capture-sizes", "1", "2", "4"],
        ["--compilation-config.mode", "3", "--compilation-config.cudagraph_mode=FULL"],
        ["-O3", "-O", "2", "--hf-token"],
        ["--chat-template", "a\nmulti-line template"],
    ],
)
def test_what_vllms_parser_reads_is_accepted(args: list[str]) -> None:
    parse_spec({"model": {"name": "m"}, "image": "i", "engine": {"extraArgs": args}})


@pytest.mark.parametrize(
    "name", ["a/b\nc", "a--b/c", "a/b..c", "./rel", "owner/", "/x\ty", "x" * 97]
)
def test_model_names_that_are_no_repo_id_or_path_are_refused(name: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({"model": {"name": name}, "image": "i"})
    assert caught.value.field_path == "spec.model.name"


@pytest.mark.parametrize("name", ["m", "deepseek-ai/DeepSeek-V4.1-Flash", "/models/v4.1 flash"])
def test_repo_ids_and_absolute_paths_are_accepted(name: str) -> None:
    parse_spec({"model": {"name": name}, "image": "i"})


def test_an_option_only_a_newer_release_has_fails_the_release_check_with_the_nearest_name() -> None:
    option = ONLY_NEWER[0]
    typo = option[:-1] + "x"
    res = resolve(spec(vllmVersion="0.30.0", engine={"extraArgs": [option]}), gb200_pool())
    failed = next(c for c in res.checks if c.name == "ExtraArgsInRelease")
    assert not failed.passed and not res.backend_runnable
    assert repr(option) in failed.message and "0.30.0" in failed.message
    newest = resolve(spec(vllmVersion="0.33.0", engine={"extraArgs": [option]}), gb200_pool())
    assert next(c for c in newest.checks if c.name == "ExtraArgsInRelease").passed
    assert parser.nearest(typo, "0.33.0") == option
