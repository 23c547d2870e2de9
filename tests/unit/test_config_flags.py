"""JSON config flags in extraArgs read as vLLM's FlexibleArgumentParser reads them."""

from __future__ import annotations

from deepseek_operator.api.extra_args.config_flags import final_config, normalised


def _additional(args: list[str]) -> object:
    return final_config(args, lambda name: name == "--additional-config")


def test_the_last_config_replaces_the_whole_config() -> None:
    assert _additional(
        ['--additional-config={"a": 1, "b": 2}', "--additional-config", '{"a": 3}']
    ) == {"a": 3}


def test_dotted_keys_of_one_spelling_merge_and_win_over_every_json_config() -> None:
    args = [
        "--additional-config.x.y=1",
        '--additional-config={"x": 0}',
        "--additional-config.z",
        "true",
    ]
    assert _additional(args) == {"x": {"y": 1}, "z": True}


def test_underscores_read_as_dashes_in_the_flag_name_only() -> None:
    assert (
        normalised("--additional_config.decode_backend=a_b")
        == "--additional-config.decode_backend=a_b"
    )
    assert _additional(['--additional_config={"k": "v"}']) == {"k": "v"}


def test_unset_is_none_and_a_value_that_is_not_json_stays_a_string() -> None:
    assert _additional(["--max-num-seqs", "8"]) is None
    assert _additional(["--additional-config", "{broken"]) == "{broken"
    assert _additional(["--additional-config"]) == ""
