"""Layout advice: the other TP / DP / EP splits of a replica's GPUs that the decision rules
accept, each with the requests at ``maxModelLen`` it holds, best first.

KV is replicated over TP ranks (``max_tp_shards=1``) while every DP rank has its own pool, so on
the same GPUs a DP layout can hold several times the requests of a TP one (vllm-project/recipes
#762: V4-Flash on 8 x B200, DP8 logs 7.7 x the concurrency of TP8). The operator never changes
the user's layout; it lists the alternatives in ``status.capacity[].layouts`` and in ``render``,
and the Ready message names the best one when it holds clearly more (:data:`CLEARLY_MORE`).

Only single-pod replicas without pipeline or context parallelism are advised on (moving DP ranks
across pods changes the pod shape, which is not the same GPUs). Pure: no clock, no environment,
no Kubernetes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.engine.capacity_report import CapacityReport, LayoutOption
from deepseek_operator.errors import SpecError

# The Ready message names the best layout when it holds at least this many times the requests
# of the chosen one.
CLEARLY_MORE = 1.5


def advisable(spec: DeepSeekServingSpec) -> bool:
    """Whether ``spec``'s layout is one the advice can vary: one pod per replica, no PP / CP."""
    p = spec.parallelism
    single_pod = p.data_parallel_size_local in (None, p.data_parallel_size)
    return (
        single_pod
        and p.pipeline_parallel_size == 1
        and p.decode_context_parallel_size == 1
        and p.prefill_context_parallel_size == 1
        and p.tensor_parallel_size * p.data_parallel_size > 1
    )


def alternative_specs(spec: DeepSeekServingSpec) -> Iterator[DeepSeekServingSpec]:
    """``spec`` with every other (TP, DP, EP) split of its GPUs per replica: TP a power of two
    that divides them, DP the rest, EP on or off (EPLB only with EP). Splits the spec's own
    validation refuses are left out."""
    p = spec.parallelism
    gpus = p.tensor_parallel_size * p.data_parallel_size
    own = (p.tensor_parallel_size, p.data_parallel_size, p.expert_parallel)
    tp = 1
    while tp <= gpus:
        if gpus % tp == 0:
            for ep in (True, False):
                if (tp, gpus // tp, ep) == own:
                    continue
                raw = spec.model_dump(by_alias=True, exclude_none=True)
                raw["parallelism"] = {
                    **raw.get("parallelism", {}),
                    "tensorParallelSize": tp,
                    "dataParallelSize": gpus // tp,
                    "expertParallel": ep,
                    "enableEplb": p.enable_eplb and ep,
                }
                raw["parallelism"].pop("dataParallelSizeLocal", None)
                try:
                    yield DeepSeekServingSpec.model_validate(raw)
                except (ValueError, SpecError):  # pydantic's ValidationError is a ValueError
                    continue
        tp *= 2


def layout_rows(
    spec: DeepSeekServingSpec, report: CapacityReport, chosen: bool
) -> tuple[LayoutOption, ...]:
    """``spec``'s layout on every GPU type of ``report``, one option each."""
    p = spec.parallelism
    return tuple(
        LayoutOption(
            tensor_parallel=p.tensor_parallel_size,
            data_parallel=p.data_parallel_size,
            expert_parallel=p.expert_parallel,
            gpu_product=row.gpu.product,
            concurrent_requests=row.concurrent_requests,
            kv_layout=row.kv_layout,
            chosen=chosen,
        )
        for row in report.rows
    )


def alternatives(
    spec: DeepSeekServingSpec,
    decide: Callable[[DeepSeekServingSpec], CapacityReport | None],
) -> tuple[LayoutOption, ...]:
    """Every alternative of ``spec`` that ``decide`` accepts (it returns the alternative's
    capacity report where the decision rules let it run and place, else None), per GPU type."""
    found: list[LayoutOption] = []
    for alternative in alternative_specs(spec):
        rep = decide(alternative)
        if rep is not None and rep.rows and not rep.unknown and not rep.refused:
            found.extend(layout_rows(alternative, rep, chosen=False))
    return tuple(found)


def options(
    spec: DeepSeekServingSpec, chosen: CapacityReport, others: tuple[LayoutOption, ...]
) -> tuple[LayoutOption, ...]:
    """The chosen layout and the accepted alternatives (:func:`alternatives`), per GPU type,
    best first."""
    found = (*layout_rows(spec, chosen, chosen=True), *others)
    # Best first per GPU type; the chosen layout ahead of an equal alternative.
    return tuple(sorted(found, key=lambda o: (o.gpu_product, -o.concurrent_requests, not o.chosen)))


def best_alternative(layouts: tuple[LayoutOption, ...]) -> tuple[LayoutOption, LayoutOption] | None:
    """(the best alternative, the chosen layout) on the GPU type where the alternative holds the
    most, when it holds at least :data:`CLEARLY_MORE` times the chosen layout's requests."""
    best: tuple[LayoutOption, LayoutOption] | None = None
    for mine in (o for o in layouts if o.chosen):
        others = [o for o in layouts if not o.chosen and o.gpu_product == mine.gpu_product]
        if not others:
            continue
        top = max(others, key=lambda o: o.concurrent_requests)
        if top.concurrent_requests >= CLEARLY_MORE * max(mine.concurrent_requests, 1e-9) and (
            best is None or top.concurrent_requests > best[0].concurrent_requests
        ):
            best = (top, mine)
    return best


def advice_line(layouts: tuple[LayoutOption, ...]) -> str:
    """'TP1 x DP8 + EP holds 157.20 requests at maxModelLen on NVIDIA-B200, 7.7 x this layout's
    20.43 (parallelism...)', or '' when the chosen layout is already (about) the best."""
    found = best_alternative(layouts)
    if found is None:
        return ""
    top, mine = found
    ratio = top.concurrent_requests / mine.concurrent_requests if mine.concurrent_requests else 0
    times = f"{ratio:.1f} x" if ratio else "against none for"
    return (
        f"layout advice: {top.name} holds {top.concurrent_requests:.2f} requests at maxModelLen "
        f"on {top.gpu_product}, {times} this layout's {mine.concurrent_requests:.2f} "
        f"({top.fields}; the operator keeps the layout you chose)"
    )
