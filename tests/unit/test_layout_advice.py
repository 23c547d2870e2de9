"""Layout advice: the other TP / DP / EP splits of the same GPUs that the decision rules accept,
best first, in status.capacity, in the Ready message when clearly better, and in render."""

from __future__ import annotations

from typing import Any

from deepseek_operator.api.load import parse_spec
from deepseek_operator.engine import layout_advice as L
from deepseek_operator.engine.decision import resolve
from deepseek_operator.engine.stability import PreviousDecision
from deepseek_operator.nodes.facts import NodeInventory, build_inventory
from deepseek_operator.render.status import build_status
from tests.gpu_nodes import make_gpu_node

NOW = "2026-12-06T00:00:00Z"


def _b200() -> NodeInventory:
    """One 8 x B200 node (GFD memory label 183359 MiB)."""
    return build_inventory([make_gpu_node("b200-0", "NVIDIA-B200", gfd_memory=True, kwok=False)])


def _flash(tp: int, dp: int, **engine: Any) -> Any:
    """V4-Flash on MegaMoE as vllm-project/vllm#51454 ran it on 8 x B200 (0.95, fp8, 8K)."""
    return parse_spec(
        {
            "model": {"name": "deepseek-ai/DeepSeek-V4-Flash"},
            "image": "vllm/vllm-openai:v0.33.0",
            "moeBackend": "deep_gemm_mega_moe",
            "parallelism": {
                "tensorParallelSize": tp,
                "dataParallelSize": dp,
                "expertParallel": True,
            },
            "engine": {
                "gpuMemoryUtilization": 0.95,
                "kvCacheDtype": "fp8",
                "maxNumBatchedTokens": 8192,
                **engine,
            },
        }
    )


def test_tp8_v4_flash_on_8_b200_is_advised_dp8() -> None:
    res = resolve(_flash(8, 1), _b200())
    assert res.capacity is not None
    layouts = res.capacity.layouts
    names = [o.name for o in layouts]
    # Every EP split MegaMoE accepts, best first; no EP-off split (MegaMoE's guards refuse it).
    assert names == ["TP1 x DP8 + EP", "TP2 x DP4 + EP", "TP4 x DP2 + EP", "TP8 x DP1 + EP"]
    assert [o.chosen for o in layouts] == [False, False, False, True]
    requests = [o.concurrent_requests for o in layouts]
    assert requests == sorted(requests, reverse=True)
    # KV is replicated over TP: DP8 holds ~7.7 x TP8 (vllm#51454 logged 7.7 x on 0.25.0).
    assert 7 < requests[0] / requests[-1] < 8
    line = L.advice_line(layouts)
    assert line.startswith("layout advice: TP1 x DP8 + EP holds")
    assert "tensorParallelSize 1, dataParallelSize 8, expertParallel true" in line

    status = build_status(res, generation=1, ready_replicas=0, now=NOW)
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert "layout advice: TP1 x DP8 + EP" in ready.message
    assert status.capacity is not None
    rows = status.capacity[0].layouts
    assert rows is not None and [r.chosen for r in rows] == [False, False, False, True]
    assert (rows[0].tensor_parallel_size, rows[0].data_parallel_size) == (1, 8)
    # The user's layout is what gets rendered.
    assert res.moe_backend == "deep_gemm_mega_moe"


def test_no_advice_where_the_chosen_layout_is_already_best() -> None:
    res = resolve(_flash(1, 8), _b200())
    assert res.capacity is not None and res.capacity.layouts[0].chosen
    assert L.advice_line(res.capacity.layouts) == ""
    status = build_status(res, generation=1, ready_replicas=0, now=NOW)
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert "layout advice" not in ready.message


def test_advice_needs_clearly_more_than_the_chosen_layout() -> None:
    def option(tp: int, requests: float, chosen: bool) -> L.LayoutOption:
        return L.LayoutOption(tp, 8 // tp, True, "NVIDIA-B200", requests, "", chosen)

    close = (option(1, 14.9, False), option(8, 10.0, True))
    assert L.advice_line(close) == ""
    clear = (option(1, 15.0, False), option(8, 10.0, True))
    assert "1.5 x this layout's 10.00" in L.advice_line(clear)


def test_multi_pod_and_pipeline_layouts_get_no_advice() -> None:
    multi_pod = _flash(1, 8)
    multi_pod = multi_pod.model_copy(
        update={
            "parallelism": multi_pod.parallelism.model_copy(update={"data_parallel_size_local": 4})
        }
    )
    assert not L.advisable(multi_pod)
    assert L.advisable(_flash(8, 1))


def test_render_prints_the_layout_table() -> None:
    from deepseek_operator.commands.render.output import capacity_lines

    lines = capacity_lines(resolve(_flash(8, 1), _b200()))
    table = lines[
        lines.index("  layouts of the same GPUs the decision rules accept (best first):") :
    ]
    assert "TP1 x DP8 + EP" in table[2] and table[-3].endswith("(chosen)")
    assert table[-2].startswith("  layout advice: TP1 x DP8 + EP")


def test_the_alternatives_are_decided_once_per_spec_whatever_the_previous_decision(
    monkeypatch: Any,
) -> None:
    # A serving's second reconcile carries its previous decision (a different resolve key); the
    # alternatives do not depend on it, so they are not decided again on the same inventory.
    calls: list[int] = []
    real = L.alternative_specs

    def counted(spec: Any) -> Any:
        calls.append(1)
        return real(spec)

    monkeypatch.setattr(L, "alternative_specs", counted)
    inventory = _b200()
    first = resolve(_flash(8, 1), inventory)
    previous = PreviousDecision(first.moe_backend, first.reason)
    again = resolve(_flash(8, 1), inventory, previous)
    assert len(calls) == 1
    assert first.capacity is not None and again.capacity is not None
    assert again.capacity.layouts == first.capacity.layouts
    # A new inventory (a node change) decides them afresh.
    resolve(_flash(8, 1), _b200(), previous)
    assert len(calls) == 2
