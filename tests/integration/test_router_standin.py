"""The real vllm-router (the pinned release, hack/install-vllm-router.sh) in P/D mode in front of
two vLLM stand-ins (tests/kind/vllm-standin/vllm), all on 127.0.0.1, no cluster: a request to
the router reaches the prefill engine first, then the decode engine with the prefill's
``kv_transfer_params``, and the decode engine opens the prefill engine's NIXL side channel before
it answers. This proves the stand-in speaks the protocol vllm-router drives (the kind tier relies
on it) and the router's probe paths the operator renders (/readiness, /liveness).

Without the router's virtualenv the test skips with the command to run, except under CI or
DSO_REQUIRE_CLUSTER=1 (`make test`, which installs it) where it fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from deepseek_operator.api.load import ServingObject
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.render.router import engine_selectors, router_args, router_pod_template
from tests.k8s.ports import free_port
from tests.router_venv import VENV, router_venv_file

ROOT = pathlib.Path(__file__).resolve().parents[2]
STANDIN = ROOT / "tests/kind/vllm-standin/vllm"
HOST = "127.0.0.1"
START_TIMEOUT_S = 60


def _router_binary() -> pathlib.Path:
    return router_venv_file("bin/vllm-router")


def http(method: str, url: str, body: Any = None, timeout: float = 10) -> tuple[int, Any]:
    """``(status, decoded JSON or text)`` of one request."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read().decode()
            code = resp.status
    except urllib.error.HTTPError as exc:
        raw, code = exc.read().decode(), exc.code
    try:
        return code, json.loads(raw)
    except ValueError:
        return code, raw


def wait_ok(url: str, proc: subprocess.Popen[bytes], log: pathlib.Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{proc.args} exited:\n{log.read_text()[-3000:]}"
        with contextlib.suppress(OSError):
            if http("GET", url, timeout=2)[0] == 200:
                return
        time.sleep(0.2)
    pytest.fail(f"{url} not 200 after {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def started(
    argv: list[str], env: dict[str, str], log: pathlib.Path
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def engine(role: str, port: int, side_channel: int) -> tuple[list[str], dict[str, str]]:
    """A stand-in's argv and env as a role's pod gets them (kv role, side channel, pod name)."""
    kv_role = {"prefill": "kv_producer", "decode": "kv_consumer"}[role]
    argv = [
        sys.executable, str(STANDIN), "serve", "m", "--served-model-name", "m",
        "--host", HOST, "--port", str(port), "--data-parallel-size", "1",
        "--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": kv_role}),
    ]  # fmt: skip
    env = {
        "HOSTNAME": f"{role}-0",
        "VLLM_NIXL_SIDE_CHANNEL_HOST": HOST,
        "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side_channel),
    }
    return argv, env


def _pd_flags() -> list[str]:
    """The rendered router argv of a disaggregated serving, its discovery flags swapped for the
    static worker lists this test gives: the policy and P/D flags are the operator's."""
    spec = DeepSeekServingSpec.model_validate(
        {
            "model": {"name": "m"},
            "image": "vllm/vllm-openai:v0.33.0",
            "disaggregation": {"roles": [{"role": "prefill"}, {"role": "decode"}]},
            "router": {"policy": "round_robin"},
        }
    )
    serving = ServingObject(name="pd", namespace="llm", spec=spec)
    args = router_args(serving, engine_selectors(serving, multi_pod=False))
    kept = args[args.index("--policy") : args.index("--service-discovery")]
    assert kept == ["--policy", "round_robin", "--vllm-pd-disaggregation", "--kv-connector", "nixl"]
    return kept


@pytest.fixture(scope="module")
def pd_router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    router = _router_binary()
    logs = tmp_path_factory.mktemp("router-standin")
    ports = {k: free_port() for k in ("prefill", "decode", "p_side", "d_side", "router", "metrics")}
    p_argv, p_env = engine("prefill", ports["prefill"], ports["p_side"])
    d_argv, d_env = engine("decode", ports["decode"], ports["d_side"])
    router_argv = [
        str(router), "--host", HOST, "--port", str(ports["router"]), *_pd_flags(),
        "--prefill", f"http://{HOST}:{ports['prefill']}",
        "--decode", f"http://{HOST}:{ports['decode']}",
        "--prometheus-host", HOST, "--prometheus-port", str(ports["metrics"]),
    ]  # fmt: skip
    with (
        started(p_argv, p_env, logs / "prefill.log") as prefill,
        started(d_argv, d_env, logs / "decode.log") as decode,
    ):
        wait_ok(f"http://{HOST}:{ports['prefill']}/health", prefill, logs / "prefill.log")
        wait_ok(f"http://{HOST}:{ports['decode']}/health", decode, logs / "decode.log")
        with started(router_argv, {}, logs / "router.log") as proc:
            # The probe paths the router pod is rendered with.
            probes = router_pod_template(ServingObject("x", "y", _spec()), {"": {}}, "i")
            container = probes["spec"]["containers"][0]
            for probe in ("readinessProbe", "livenessProbe"):
                path = container[probe]["httpGet"]["path"]
                wait_ok(f"http://{HOST}:{ports['router']}{path}", proc, logs / "router.log")
            yield ports


def _spec() -> DeepSeekServingSpec:
    return DeepSeekServingSpec.model_validate({"model": {"name": "m"}, "image": "i"})


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}),
        ("/v1/completions", {"model": "m", "prompt": "the capital of France is", "max_tokens": 5}),
    ],
    ids=["chat completion", "completion"],
)  # fmt: skip
def test_a_request_through_the_router_is_prefilled_then_decoded_over_the_side_channel(
    pd_router: dict[str, int], path: str, body: dict[str, Any]
) -> None:
    code, answer = http("POST", f"http://{HOST}:{pd_router['router']}{path}", body)
    assert code == 200, answer
    served = answer["standin"]
    assert served == {
        "prefill": "prefill-0",
        "decode": "decode-0",
        "side_channel": f"{HOST}:{pd_router['p_side']}",
        "side_channel_reached": True,
    }
    choice = answer["choices"][0]
    text = choice["message"]["content"] if "message" in choice else choice["text"]
    assert json.loads(text) == served  # what a client sees in the answer itself


def test_the_prefill_answer_carries_its_side_channel(pd_router: dict[str, int]) -> None:
    # The router's first hop, sent by hand: what vLLM's pull scheduler returns.
    first_hop = {
        "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
        "remote_block_ids": None, "remote_host": None, "remote_port": None,
    }  # fmt: skip
    body = {"model": "m", "prompt": "x", "max_tokens": 1, "kv_transfer_params": first_hop}
    code, answer = http("POST", f"http://{HOST}:{pd_router['prefill']}/v1/completions", body)
    assert code == 200
    params = answer["kv_transfer_params"]
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    assert (params["remote_host"], params["remote_port"]) == (HOST, pd_router["p_side"])
    assert params["transfer_mode"] == "pull" and params["remote_engine_id"]


def test_a_decode_that_cannot_reach_the_side_channel_fails_the_request(
    pd_router: dict[str, int],
) -> None:
    closed = free_port()  # nothing listens there
    params = {"do_remote_prefill": True, "remote_host": HOST, "remote_port": closed}
    body = {"model": "m", "prompt": "x", "max_tokens": 5, "kv_transfer_params": params}
    code, answer = http("POST", f"http://{HOST}:{pd_router['decode']}/v1/completions", body)
    assert code == 500 and f"{HOST}:{closed}" in answer["message"], answer


def test_the_standin_exposes_vllms_per_engine_gauges(pd_router: dict[str, int]) -> None:
    code, text = http("GET", f"http://{HOST}:{pd_router['prefill']}/metrics")
    assert code == 200
    assert 'vllm:num_requests_running{engine="0",model_name="m"} 0.0' in text


VLLM_PULL_SCHEDULER = "vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py"


def _vllm_kv_transfer_keys(release: str) -> set[str]:
    """The keys of the ``kv_transfer_params`` dict vLLM's pull scheduler returns from
    ``request_finished``, read from the release's own source (its cached virtualenv)."""
    import ast
    import glob

    venv = VENV.parents[1] / "vllm" / release
    found = glob.glob(str(venv / "lib/python3*/site-packages" / VLLM_PULL_SCHEDULER))
    if not found:
        message = f"vLLM {release} is not installed: run hack/install-vllm.sh --newest"
        required = os.environ.get("CI", "").lower() in ("1", "true", "yes")
        if required or os.environ.get("DSO_REQUIRE_CLUSTER", "") not in ("", "0"):
            pytest.fail(message)
        pytest.skip(message)
    tree = ast.parse(pathlib.Path(found[0]).read_text())
    method = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "request_finished"
    )
    for node in ast.walk(method):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "dict":
            keys = {k.arg for k in node.keywords if k.arg}
            if "remote_host" in keys:
                return keys
    raise AssertionError(f"no kv_transfer_params dict in {found[0]}")


def test_the_prefill_answer_has_exactly_the_keys_vllms_pull_scheduler_returns() -> None:
    import importlib.machinery
    import importlib.util

    from deepseek_operator.catalog.vllm import newest_release

    loader = importlib.machinery.SourceFileLoader("vllm_standin", str(STANDIN))
    spec = importlib.util.spec_from_loader("vllm_standin", loader)
    assert spec is not None
    standin = importlib.util.module_from_spec(spec)
    loader.exec_module(standin)
    params = standin.prefill_params("cmpl-1", 3)
    assert set(params) == _vllm_kv_transfer_keys(newest_release())
