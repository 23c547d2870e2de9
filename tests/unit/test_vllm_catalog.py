"""The shipped vLLM release data: one file per release of hack/versions.env, loadable, coherent."""

from __future__ import annotations

import pathlib
import re

import pytest

from deepseek_operator.catalog.vllm import (
    all_moe_backends,
    newest_release,
    supported_releases,
    version_key,
    vllm_release,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _pinned_releases() -> list[str]:
    text = (ROOT / "hack/versions.env").read_text()
    match = re.search(r'^VLLM_RELEASES="([^"]+)"', text, re.MULTILINE)
    assert match, "hack/versions.env has no VLLM_RELEASES"
    return match.group(1).split()


def test_one_data_file_per_pinned_release() -> None:
    assert list(supported_releases()) == _pinned_releases()
    assert newest_release() == _pinned_releases()[-1]
    assert sorted(_pinned_releases(), key=version_key) == _pinned_releases()


@pytest.mark.parametrize("release", _pinned_releases())
def test_release_data_is_coherent(release: str) -> None:
    data = vllm_release(release)
    assert data.release == release
    names = set(data.moe_backends)
    assert "auto" in names
    # vLLM's own invariants, as the release states them.
    assert data.mega_moe_backends <= names
    assert data.native_mega_moe_backends | data.flashinfer_moe_ep_backends == data.mega_moe_backends
    assert data.flashinfer_moe_ep_architecture_checked <= data.flashinfer_moe_ep_backends
    # The serve option table: the typed fields' flags are there, with their dests.
    options = data.serve_options
    assert options["--moe-backend"].dest == "moe_backend"
    assert set(options["--moe-backend"].choices or ()) == names
    assert options["--tensor-parallel-size"].dest == options["-tp"].dest == "tensor_parallel_size"
    assert options["--enable-expert-parallel"].takes_value is False
    assert options["--headless"].dest == "headless"
    assert data.parser_rules["underscores_for_dashes"] is True


def test_all_moe_backends_is_the_union() -> None:
    union = set().union(*(vllm_release(r).moe_backends for r in supported_releases()))
    assert set(all_moe_backends()) == union
    assert len(all_moe_backends()) == len(union)


def test_unsupported_release_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        vllm_release("0.1.0")
