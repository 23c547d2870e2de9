"""``render`` reads YAML as kubectl does: go-yaml's plain floats, its alias limit, bounded cost."""

from __future__ import annotations

import pathlib
import time
import tracemalloc

import pytest

from deepseek_operator.commands.render.inputs import _parse_yaml, load_serving_file
from deepseek_operator.errors import InputError

HEAD = (
    "apiVersion: serving.deepseek-operator.io/v1alpha1\nkind: DeepSeekServing\n"
    "metadata: {name: y}\n"
)


def _bomb(levels: int, width: int) -> str:
    """A billion-laughs document: each anchor a list of ``width`` aliases of the one before."""
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return (
        HEAD
        + "\n".join(lines)
        + f"\nspec: {{engine: {{speculativeConfig: {{m: *a{levels - 1}}}}}}}\n"
    )


def test_an_alias_bomb_is_refused_like_kubectl_in_under_a_second_and_100_mb(
    tmp_path: pathlib.Path,
) -> None:
    # 9 levels of 9 expand to 9**9 (387 million) strings: what cost render 28 s and 1.8 GiB.
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb(9, 9))
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(InputError, match="document contains excessive aliasing"):
        load_serving_file(str(path))
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 1.0, elapsed
    assert peak < 100 * 2**20, peak


def test_a_few_aliases_are_read_as_kubectl_reads_them() -> None:
    doc = _parse_yaml(HEAD + "x: &x {a: 1}\ny: [*x, *x, *x]\n")[0]
    assert doc["y"] == [{"a": 1}] * 3


@pytest.mark.parametrize(
    ("plain", "value"),
    [("1e+308", 1e308), ("1e3", 1000.0), ("-2E-3", -0.002), (".5", 0.5), ("1e400", "1e400")],
)
def test_plain_floats_are_numbers_as_go_yaml_reads_them(plain: str, value: object) -> None:
    assert _parse_yaml(f"v: {plain}\n")[0]["v"] == value


def test_quoted_numbers_stay_strings() -> None:
    assert _parse_yaml("v: '1e3'\n")[0]["v"] == "1e3"
