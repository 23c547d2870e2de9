"""DeepSeek-V4-Pro's capacity where users run it: the rack-scale P/D example per role, the H200
recipe whose context limit users argue about (vllm-project/recipes#381, #832), and the refusal
of a role that cannot hold one request at maxModelLen."""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import yaml

from deepseek_operator.api.load import parse_serving, parse_spec
from deepseek_operator.engine.decision import resolve
from deepseek_operator.nodes.facts import NodeInventory, build_inventory
from deepseek_operator.plan import Observed, plan

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOW = "2026-12-06T00:00:00Z"


def _nodes(name: str) -> NodeInventory:
    return build_inventory(yaml.safe_load((ROOT / "examples" / name).read_text())["items"])


def _example() -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load((ROOT / "examples/dsv4-pro-3p2d-nvl72.yaml").read_text())
    return raw


def _role_status(status: dict[str, Any], role: str) -> dict[str, Any]:
    found: dict[str, Any] = next(r for r in status["roles"] if r["role"] == role)
    return found


def test_the_nvl72_example_shows_capacity_per_role() -> None:
    p = plan(parse_serving(_example()), _nodes("nodes-gb200-nvl72.yaml"), Observed.offline(), NOW)
    status = p.status.model_dump(by_alias=True, exclude_none=True)
    prefill, decode = _role_status(status, "prefill"), _role_status(status, "decode")
    (pre,) = prefill["capacity"]
    (dec,) = decode["capacity"]
    assert pre["gpuProduct"] == dec["gpuProduct"] == "NVIDIA-GB200"
    assert pre["maxModelLen"] == dec["maxModelLen"] == 131072
    # Prefill DEP8: 123 GiB of weights per GPU leave ~34 GiB; decode DEP16 ~89 GiB per GPU,
    # and 16 DP ranks of their own pools.
    assert 30 < float(pre["kvCacheGib"]) < 40 and float(pre["concurrentRequests"]) > 8
    assert float(dec["kvCacheGib"]) > 80 and float(dec["concurrentRequests"]) > 500
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["BackendResolved"]["status"] == "True"


def test_a_role_that_cannot_hold_one_request_keeps_the_pair_pending() -> None:
    # llm-d's 32K prefill batch: vLLM 0.33.0 reserves every sliding-window cache for the tokens
    # in flight, and MegaMoE's buffer grows with the batch: no 128K request fits a DEP8 rank.
    raw = copy.deepcopy(_example())
    prefill = next(r for r in raw["spec"]["disaggregation"]["roles"] if r["role"] == "prefill")
    prefill["engine"]["maxNumBatchedTokens"] = 32768
    p = plan(parse_serving(raw), _nodes("nodes-gb200-nvl72.yaml"), Observed.offline(), NOW)
    status = p.status.model_dump(by_alias=True, exclude_none=True)
    conditions = {c["type"]: c for c in status["conditions"]}
    resolved = conditions["BackendResolved"]
    assert resolved["status"] == "False" and resolved["reason"] == "KVCacheCapacityFailed"
    assert "prefill: deep_gemm_mega_moe cannot run: KVCacheCapacity failed" in resolved["message"]
    assert "cannot hold one request at maxModelLen 131072" in resolved["message"]
    assert conditions["Ready"]["status"] == "False"
    # Half a pair would load weights for nothing: no workload of either role is written.
    assert not [o for o in p.objects if o["kind"] in ("Deployment", "LeaderWorkerSet")]


def _recipe_381(**engine: Any) -> Any:
    """vllm-project/recipes#381's command on one 8 x H200 node, with vLLM 0.33.0: DP8 + EP,
    ``--kv-cache-dtype fp8 --max-model-len 800000``."""
    raw = {
        "model": {"name": "deepseek-ai/DeepSeek-V4-Pro"},
        "image": "vllm/vllm-openai:v0.33.0",
        "moeBackend": "auto",
        "parallelism": {"tensorParallelSize": 1, "dataParallelSize": 8, "expertParallel": True},
        "engine": {"kvCacheDtype": "fp8", "maxModelLen": 800000, **engine},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    return resolve(parse_spec(raw), _nodes("nodes-h200.yaml"))


def test_recipes_381_800k_on_8_h200_is_refused_with_the_numbers() -> None:
    # 123 GiB of weights per GPU (the attention and embedding are whole on every DP rank) leave
    # 6.55 GiB at 0.95 and nothing at the default 0.9; one 800K request takes 9,807 blocks of
    # 1.37 MiB at 8K batched tokens (13.1 GiB): vLLM 0.33.0 would refuse to start.
    for utilisation in (None, 0.95):
        engine = {"gpuMemoryUtilization": utilisation} if utilisation else {}
        res = _recipe_381(**engine)
        assert not res.backend_runnable and res.reason == "KVCacheCapacityFailed", res.message
        assert "cannot hold one request at maxModelLen 800000" in res.message
        assert res.capacity is not None and res.capacity.rows[0].concurrent_requests == 0


def test_recipes_381_800k_fits_with_a_small_batch_and_high_utilisation() -> None:
    # With 2K batched tokens the per-request sliding-window reservation shrinks to 4,815 blocks
    # (6.44 GiB) and the activation allowance with it: about one request per DP rank, eight to
    # ten per node: the 800K the recipe promises, barely.
    res = _recipe_381(gpuMemoryUtilization=0.95, maxNumBatchedTokens=2048)
    assert res.backend_runnable and res.capacity is not None
    (row,) = res.capacity.rows
    assert row.blocks_per_request == 4815
    assert 1 <= row.requests_per_rank < 1.25 and row.dp_ranks == 8


def _walk(doc: Any, path: str) -> Any:
    """The value of a printer column's JSONPath in ``doc`` (the forms the CRD uses: ``.a.b``,
    ``[0]`` and ``[?(@.k=="v")]``), as kubectl resolves it for one object."""
    import re

    node = doc
    for key, index, field, value in re.findall(
        r'\.(\w+)|\[(\d+)\]|\[\?\(@\.(\w+)=="([^"]+)"\)\]', path
    ):
        if key:
            node = node[key]
        elif index:
            node = node[int(index)]
        else:
            node = next(item for item in node if item[field] == value)
    return node


def test_the_requests_printer_columns_read_each_roles_concurrency() -> None:
    from deepseek_operator.api.crd import PRINTER_COLUMNS

    columns = {c["name"]: c for c in PRINTER_COLUMNS}
    p = plan(parse_serving(_example()), _nodes("nodes-gb200-nvl72.yaml"), Observed.offline(), NOW)
    doc = {"status": p.status.model_dump(by_alias=True, exclude_none=True)}
    for role in ("prefill", "decode"):
        column = columns[f"{role.capitalize()}Requests"]
        value = _walk(doc, column["jsonPath"])
        assert value == _role_status(doc["status"], role)["capacity"][0]["concurrentRequests"]
        assert column["priority"] == 1  # -o wide
    # An aggregated serving: the first GPU type's concurrency, in the default columns.
    res_plan = plan(
        parse_serving(
            {
                "apiVersion": "serving.deepseek-operator.io/v1alpha1",
                "kind": "DeepSeekServing",
                "metadata": {"name": "a", "namespace": "llm"},
                "spec": {
                    "model": {"name": "deepseek-ai/DeepSeek-V4-Pro"},
                    "image": "vllm/vllm-openai:v0.33.0",
                    "moeBackend": "deep_gemm_mega_moe",
                    "parallelism": {
                        "tensorParallelSize": 1,
                        "dataParallelSize": 8,
                        "dataParallelSizeLocal": 4,
                        "expertParallel": True,
                    },
                    "engine": {"maxModelLen": 131072},
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                },
            }
        ),
        _nodes("nodes-gb200-nvl72.yaml"),
        Observed.offline(),
        NOW,
    )
    aggregated = {"status": res_plan.status.model_dump(by_alias=True, exclude_none=True)}
    requests = _walk(aggregated, columns["Requests"]["jsonPath"])
    assert float(requests) > 0 and "priority" not in columns["Requests"]
