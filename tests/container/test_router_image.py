"""The router image (Dockerfile target ``router``), built by ``hack/build-image.sh`` beside the
operator's: vllm-router runs in it as the router pod runs it (numeric non-root user, read-only
root, no capabilities, no network), and the argv the operator renders parses with the vllm-router
the image holds."""

from __future__ import annotations

import json

import pytest

from deepseek_operator.api.load import ServingObject
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.names import VLLM_ROUTER_VERSION
from deepseek_operator.render.router import engine_selectors, router_args
from tests.container.conftest import HARDENED, Image

pytestmark = pytest.mark.container

# vllm-router's own parser and its validation, as its console script runs them before starting.
PARSE = (
    "import sys; from vllm_router.launch_router import parse_router_args; "
    "a = parse_router_args(sys.argv[1:]); a._validate_router_args(); "
    "print(a.vllm_pd_disaggregation, sorted(a.prefill_selector.items()))"
)


def _pd_serving() -> ServingObject:
    spec = DeepSeekServingSpec.model_validate(
        {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash"},
            "image": "vllm/vllm-openai:v0.33.0",
            "disaggregation": {"roles": [{"role": "prefill"}, {"role": "decode"}]},
        }
    )
    return ServingObject(name="pd", namespace="llm", spec=spec)


def test_vllm_router_help_runs_in_the_router_image(image: Image) -> None:
    out = image.docker("run", "--rm", *HARDENED, image.router_tag, "--help")
    assert out.stdout.startswith("usage: vllm-router"), out.stdout[:300]
    assert "--vllm-pd-disaggregation" in out.stdout


def test_router_image_metadata(image: Image) -> None:
    config = json.loads(image.docker("image", "inspect", image.router_tag).stdout)[0]["Config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["vllm-router"]
    version = image.docker(
        "run",
        "--rm",
        *HARDENED,
        "--entrypoint",
        "python",
        image.router_tag,
        "-c",
        "from importlib.metadata import version; print(version('vllm-router'))",
    )
    assert version.stdout.strip() == VLLM_ROUTER_VERSION


def test_rendered_router_argv_parses_in_the_router_image(image: Image) -> None:
    serving = _pd_serving()
    argv = router_args(serving, engine_selectors(serving, multi_pod=False))
    out = image.docker(
        "run", "--rm", *HARDENED, "--entrypoint", "python", image.router_tag, "-c", PARSE, *argv
    )
    assert out.stdout.startswith("True "), out.stdout
    assert "('serving.deepseek-operator.io/pd-role', 'prefill')" in out.stdout
