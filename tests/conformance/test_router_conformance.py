"""Conformance with the pinned vllm-router: every router argv the operator renders is accepted by
vllm-router's own parser and validation (conformance/router_oracle.py, run in the router's
cached virtualenv), reads back as the mode, policy, namespace, port and selectors the operator
meant, and its policy choices are exactly spec.router.policy's enum.

Without the virtualenv (hack/install-vllm-router.sh, which `make test` runs) the test skips with
that command, except under CI or DSO_REQUIRE_CLUSTER=1 (`make test`) where it fails.
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
from typing import Any

from deepseek_operator.api.load import ServingObject
from deepseek_operator.api.router import ROUTER_POLICIES
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.render.router import engine_selectors, router_args
from tests.router_venv import router_venv_file

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _router_python() -> pathlib.Path:
    return router_venv_file("bin/python")


def ask(argvs: list[list[str]]) -> list[dict[str, Any]]:
    """vllm-router's answers about ``argvs``, in one process."""
    out = subprocess.run(
        [str(_router_python()), "-m", "conformance.router_oracle"],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=True,
    )
    answers: list[dict[str, Any]] = json.loads(out.stdout)
    return answers


BASE = {"model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash"}, "image": "vllm/vllm-openai:v0.33.0"}
LAYOUTS: dict[str, tuple[dict[str, Any], bool]] = {
    "disaggregated": (
        {"disaggregation": {"roles": [{"role": "prefill"}, {"role": "decode", "replicas": 2}]}},
        False,
    ),
    "aggregated, single-pod replicas": ({"replicas": 3, "router": {"enabled": True}}, False),
    "aggregated, multi-pod replicas": ({"replicas": 2, "router": {"enabled": True}}, True),
}


def _serving(layout: str, policy: str, namespace: str, port: int) -> tuple[ServingObject, bool]:
    extra, multi_pod = LAYOUTS[layout]
    router = {**extra.get("router", {}), "policy": policy}
    spec = DeepSeekServingSpec.model_validate({**BASE, **extra, "router": router, "port": port})
    return ServingObject(name="dsv41", namespace=namespace, spec=spec), multi_pod


CASES = [
    (layout, policy, namespace, port)
    for layout in LAYOUTS
    for policy in ROUTER_POLICIES
    for namespace, port in (("llm", 8000), ("team-a-inference", 30001))
]


def test_every_rendered_router_argv_is_accepted_as_meant() -> None:
    servings = [_serving(*case) for case in CASES]
    argvs = [router_args(s, engine_selectors(s, multi)) for s, multi in servings]
    answers = ask(argvs)
    assert len(answers) == len(CASES) >= 40
    for case, (serving, multi), answer in zip(CASES, servings, answers, strict=True):
        assert answer["accepted"], (case, answer)
        selectors = engine_selectors(serving, multi)
        assert answer["policy"] == case[1]
        assert answer["service_discovery"] and answer["namespace"] == case[2]
        assert answer["port"] == answer["discovery_port"] == case[3]
        assert answer["host"] == "0.0.0.0"
        if case[0] == "disaggregated":
            assert answer["pd"] and answer["kv_connector"] == "nixl"
            assert answer["prefill_selector"] == selectors["prefill"]
            assert answer["decode_selector"] == selectors["decode"]
            assert answer["selector"] == {}
            # Each role's selector names its role: it cannot match the other role's pods.
            prefill, decode = answer["prefill_selector"], answer["decode_selector"]
            assert any(decode.get(k) not in (None, v) for k, v in prefill.items())
        else:
            assert not answer["pd"] and answer["selector"] == selectors[""]


def test_policy_choices_are_the_routers() -> None:
    (answer,) = ask([["--policy", "no-such-policy"]])
    assert not answer["accepted"]
    choices = re.findall(r"'([a-z_]+)'", answer["error"][0].split("choose from", 1)[1])
    assert tuple(choices) == ROUTER_POLICIES


def test_a_refused_argv_is_refused() -> None:
    # The oracle can say no: P/D mode with neither workers nor discovery is refused by
    # vllm-router's own validation.
    (answer,) = ask([["--vllm-pd-disaggregation"]])
    assert not answer["accepted"] and "requires --prefill" in answer["error"][0]
