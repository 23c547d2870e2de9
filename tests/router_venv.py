"""The pinned vllm-router's cached virtualenv (hack/install-vllm-router.sh), for the tests that run it."""

from __future__ import annotations

import os
import pathlib

import pytest

from deepseek_operator.names import VLLM_ROUTER_VERSION

VENV = (
    pathlib.Path(os.environ.get("DSO_CACHE", pathlib.Path.home() / ".cache/deepseek-operator"))
    / "vllm-router"
    / VLLM_ROUTER_VERSION
)


def router_venv_file(relative: str) -> pathlib.Path:
    """``VENV/relative``; a missing install fails in CI or a cluster run, and skips elsewhere."""
    path = VENV / relative
    if not path.exists():
        message = (
            f"vllm-router {VLLM_ROUTER_VERSION} is not installed: run hack/install-vllm-router.sh"
        )
        required = os.environ.get("CI", "").lower() in ("1", "true", "yes")
        if required or os.environ.get("DSO_REQUIRE_CLUSTER", "") not in ("", "0"):
            pytest.fail(message)
        pytest.skip(message)
    return path
