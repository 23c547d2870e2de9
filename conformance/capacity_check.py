"""(f) of the harness: our capacity model's KV figures against the release's own KV planner,
and the MegaMoE path's routed-expert bytes against the release's own expert class.

Runs in the operator's virtualenv. For each DeepSeekServing of the capacity matrix it computes
with OUR capacity model (engine/capacity.py and kv_cache.py on the catalog's geometry.py,
gpu_memory.py, kv_layout.py and kv_layout_v41.py) the KV cache groups, the KV room on a GB200 and
an H200 for both MoE paths, and from those and the one-request boundary the block pool; it asks
conformance/capacity_oracle.py (the release's virtualenv, one process) for the groups the
release's own cache layers and planner form and its blocks and concurrency for the same available
bytes, and reports every difference. V4.1-Flash's groups depend on the GPU (the attention class
vLLM picks there), so each V4.1 case is asked once per GPU, and the class must match too.

Speculative decoding is MTP (V4-Flash's one MTP module): the draft layer adds a sliding-window
cache, and the retained lookahead comes from vLLM's own `num_prefill_lookahead_tokens` on a
SpeculativeConfig stand-in. What is not covered, and why: V4.1 speculative decoding (its draft
and compressor-ring sizes are not modelled: our model keeps the per-token estimate there), other
speculative methods, pipeline and decode context parallelism (vLLM projects the groups per
stage; V4's sliding-window specs refuse DCP). Of the weights only the MegaMoE routed experts are
counted on the meta device; docs/capacity.md says which parts come from checkpoint dimensions
and why.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from conformance.launcher import run_code, run_module
from deepseek_operator.api.load import parse_spec
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.catalog.geometry import find_geometry
from deepseek_operator.catalog.gpu_memory import MIB, PRODUCT_MEMORY_MIB
from deepseek_operator.catalog.kv_layout import V4_PRO_RATIOS, KvGroup
from deepseek_operator.engine import capacity as C
from deepseek_operator.engine import kv_cache as K
from deepseek_operator.engine.model_facts import model_facts

MODEL = "deepseek-ai/DeepSeek-V4-Flash"
PRO_MODEL = "deepseek-ai/DeepSeek-V4-Pro"
V41_MODEL = "deepseek-ai/DeepSeek-V4.1-Flash"
V4_ARCH = "DeepseekV4ForCausalLM"
V41_ARCH = "DeepseekV41ForCausalLM"
# (TP, DP, EP): KV specs do not depend on them (max_tp_shards=1), the KV room does.
LAYOUTS = ((4, 1, True), (4, 1, False), (8, 1, True), (1, 4, True), (2, 2, True))
# V4.1 adds TP16, where mega attention declines (4 heads per wo_a group) and FlashMLA serves.
V41_LAYOUTS = (*LAYOUTS, (16, 1, True))
KV_DTYPES = (None, "fp8", "bfloat16")
BATCHED = (512, 2048, 8192, 16384)
MAX_MODEL_LENS = (4096, 32768, 131072, 1048576)
GPUS = (
    C.GpuType("NVIDIA-GB200", PRODUCT_MEMORY_MIB["NVIDIA-GB200"] * MIB, "catalog"),
    C.GpuType("NVIDIA-H200", PRODUCT_MEMORY_MIB["NVIDIA-H200"] * MIB, "catalog"),
)


@dataclass(frozen=True)
class CapacityCase:
    """One layout of the capacity matrix."""

    id: str
    spec: DeepSeekServingSpec


def _matrix() -> Iterator[tuple[tuple[int, int, bool], str | None, int, int, int]]:
    """(layout, kvCacheDtype, batched tokens, maxModelLen, MTP draft tokens): the full product
    without speculative decoding, and MTP with 1 and 3 drafts on TP4/EP at 2K and 8K batched."""
    for layout, dtype, batched, length in itertools.product(
        LAYOUTS, KV_DTYPES, BATCHED, MAX_MODEL_LENS
    ):
        yield layout, dtype, batched, length, 0
    for drafts, dtype, batched, length in itertools.product(
        (1, 3), KV_DTYPES, (2048, 8192), MAX_MODEL_LENS
    ):
        yield LAYOUTS[0], dtype, batched, length, drafts


def _v41_matrix() -> Iterator[tuple[tuple[int, int, bool], str | None, int, int, int]]:
    """V4.1-Flash: the layouts (TP16 included) x kvCacheDtype x batched x maxModelLen, and the
    explicit records (fp8_ds_mla, nvfp4_ds_mla) on TP4/EP; no speculative decoding."""
    for layout, dtype, batched, length in itertools.product(
        V41_LAYOUTS, KV_DTYPES, BATCHED, MAX_MODEL_LENS
    ):
        yield layout, dtype, batched, length, 0
    for dtype, batched, length in itertools.product(
        ("fp8_ds_mla", "nvfp4_ds_mla"), (2048, 8192), MAX_MODEL_LENS
    ):
        yield LAYOUTS[0], dtype, batched, length, 0


# V4-Pro: its own compress ratios (61 layers, no sliding-window-only layer), on the layouts its
# 865 GB of weights fit (EP over 8 or 16 GPUs), at the contexts its recipes argue about (800K).
PRO_LAYOUTS = ((8, 1, True), (1, 8, True), (1, 16, True), (2, 4, True))
PRO_LENGTHS = (32768, 200000, 800000, 1048576)


def _pro_matrix() -> Iterator[tuple[tuple[int, int, bool], str | None, int, int, int]]:
    """V4-Pro: layouts x kvCacheDtype x batched (512, 8192) x maxModelLen, and MTP with 1 and 3
    drafts on DP8/EP at 8K batched."""
    for layout, dtype, batched, length in itertools.product(
        PRO_LAYOUTS, KV_DTYPES, (512, 8192), PRO_LENGTHS
    ):
        yield layout, dtype, batched, length, 0
    for drafts, dtype, length in itertools.product((1, 3), KV_DTYPES, PRO_LENGTHS):
        yield PRO_LAYOUTS[1], dtype, 8192, length, drafts


def capacity_cases(release: str) -> Iterator[CapacityCase]:
    """V4-Flash x layouts x kvCacheDtype x maxNumBatchedTokens x maxModelLen (x MTP), then
    V4-Pro's and V4.1-Flash's matrices."""
    for model, name, matrix in (
        (MODEL, "V4-Flash", _matrix()),
        (PRO_MODEL, "V4-Pro", _pro_matrix()),
        (V41_MODEL, "V4.1-Flash", _v41_matrix()),
    ):
        for (tp, dp, ep), dtype, batched, length, drafts in matrix:
            engine: dict[str, Any] = {"maxNumBatchedTokens": batched, "maxModelLen": length}
            if dtype is not None:
                engine["kvCacheDtype"] = dtype
            if drafts:
                engine["speculativeConfig"] = {"method": "mtp", "num_speculative_tokens": drafts}
            raw = {
                "model": {"name": model},
                "image": "vllm/vllm-openai:latest",
                "vllmVersion": release,
                "moeBackend": "flashinfer_trtllm",
                "parallelism": {
                    "tensorParallelSize": tp,
                    "dataParallelSize": dp,
                    "expertParallel": ep,
                },
                "engine": engine,
            }
            ident = f"{name}/tp{tp}dp{dp}{'/ep' if ep else ''}/kv:{dtype or 'auto'}"
            ident += f"/mtp{drafts}" if drafts else ""
            yield CapacityCase(f"{ident}/batched{batched}/len{length}", parse_spec(raw))
    # The rack-scale example's prefill role: V4-Pro DEP8, 32K batched tokens without async
    # scheduling (one batch in flight, not two).
    for dtype, length in itertools.product(KV_DTYPES, PRO_LENGTHS):
        engine: dict[str, Any] = {
            "maxNumBatchedTokens": 32768,
            "maxModelLen": length,
            "extraArgs": ["--no-async-scheduling"],
        }
        if dtype is not None:
            engine["kvCacheDtype"] = dtype
        raw = {
            "model": {"name": PRO_MODEL},
            "image": "vllm/vllm-openai:latest",
            "vllmVersion": release,
            "moeBackend": "flashinfer_trtllm",
            "parallelism": {"tensorParallelSize": 1, "dataParallelSize": 8, "expertParallel": True},
            "engine": engine,
        }
        ident = f"V4-Pro/tp1dp8/ep/kv:{dtype or 'auto'}/no-async/batched32768/len{length}"
        yield CapacityCase(ident, parse_spec(raw))


def group_summary(groups: tuple[KvGroup, ...]) -> list[list[list[Any]]]:
    """Our groups in the oracle's shape: per group, sorted [layer spec, count] pairs."""
    out = []
    for group in groups:
        pairs: dict[str, int] = {}
        for spec, count in group.layers:
            key = json.dumps(
                {
                    "kind": spec.kind,
                    "block_size": spec.block_size,
                    "page_bytes": spec.page_bytes,
                    "window": spec.window,
                    "stride_alignment": spec.stride_alignment,
                }
            )
            pairs[key] = pairs.get(key, 0) + count
        out.append([[json.loads(k), n] for k, n in sorted(pairs.items())])
    return out


@dataclass
class CapacityReport:
    """The outcome of (f) for one release."""

    layouts: int = 0
    pools: int = 0
    v41_layouts: int = 0  # of which V4.1-Flash
    v41_pools: int = 0
    pro_layouts: int = 0  # of which V4-Pro
    pro_pools: int = 0
    weight_checks: int = 0  # MegaMoE routed experts per rank, counted on the meta device
    mismatches: list[str] = field(default_factory=list)
    # Why the release cannot be checked at all (its code lacks the planner the oracle calls);
    # printed as such, never as agreement.
    not_covered: str = ""


# Where the oracle looks for vLLM's KV-cache planner: 0.33.0 moved it into kv_cache_planning
# (grouping split off into get_global_kv_cache_groups); 0.30.0-0.32.0 keep it in kv_cache_utils.
PLANNER_MODULES = ("vllm.v1.core.kv_cache_planning", "vllm.v1.core.kv_cache_utils")
# Exits 0 where one of them defines get_kv_cache_configs (read from the source: importing the
# planner costs as much as the whole check).
PROBE = (
    "import importlib.util, sys\n"
    f"for name in {PLANNER_MODULES!r}:\n"
    "    spec = importlib.util.find_spec(name)\n"
    "    if spec and 'def get_kv_cache_configs(' in open(spec.origin).read(): sys.exit(0)\n"
    "sys.exit(1)\n"
)


@dataclass(frozen=True)
class Query:
    """One oracle question: a case on the GPUs it is asked for, with our answer."""

    case: CapacityCase
    gpus: tuple[C.GpuType, ...]
    groups: tuple[KvGroup, ...]
    attention_class: str | None  # V4.1: the class our model says the release picks
    available: list[int]
    in_flight: int
    length: int


def _queries(case: CapacityCase, release: str) -> Iterator[Query]:
    """Our groups and the available figures to ask about: V4-Flash's groups do not depend on
    the GPU (one query over both), V4.1's do (one query per GPU, on its compute capability)."""
    spec = case.spec
    geometry = find_geometry(spec.model.name)
    assert geometry is not None
    facts = model_facts(spec.model)
    batched = spec.engine.max_num_batched_tokens
    length = spec.engine.max_model_len
    assert batched is not None and length is not None
    in_flight = K.max_concurrent_batches(spec) * batched
    per_gpu = geometry.kv_layout is not None
    for gpus in [(gpu,) for gpu in GPUS] if per_gpu else [GPUS]:
        layout = K.kv_layout(geometry, spec, release, gpus[0].cc_major)
        if isinstance(layout, str):
            # Not modelled on this GPU (nvfp4_ds_mla off SM100): no figure to prove.
            assert per_gpu, (case.id, layout)
            continue
        note, groups = layout
        available = []
        for gpu, mega in itertools.product(gpus, (False, True)):
            cap = C.capacity(spec, facts, release, mega, gpu)
            assert isinstance(cap, C.Capacity), cap
            available.append(cap.kv_bytes)
        block, per_request, _ = K.kv_blocks(groups, 0, length, in_flight, 1, 1)
        # The one-request boundary: vLLM keeps a null block, so it needs per_request + 1 blocks.
        available += [block * (per_request + 1) - 1, block * (per_request + 1)]
        yield Query(
            case,
            gpus,
            groups,
            note.split(",")[0] if per_gpu else None,
            [a for a in available if a > 0],
            in_flight,
            length,
        )


# (TP, DP) with expert parallelism: the MegaMoE path's routed experts per rank.
WEIGHT_LAYOUTS = ((4, 1), (8, 1), (1, 4), (2, 2), (1, 8), (2, 4))


def weight_cases(release: str) -> Iterator[tuple[str, DeepSeekServingSpec]]:
    """V4-Flash, V4-Pro and V4.1-Flash on the MegaMoE path, per EP layout."""
    for model, (tp, dp) in itertools.product((MODEL, PRO_MODEL, V41_MODEL), WEIGHT_LAYOUTS):
        raw = {
            "model": {"name": model},
            "image": "vllm/vllm-openai:latest",
            "vllmVersion": release,
            "moeBackend": "deep_gemm_mega_moe",
            "parallelism": {
                "tensorParallelSize": tp,
                "dataParallelSize": dp,
                "expertParallel": True,
            },
        }
        yield f"{model.split('/')[-1]}/tp{tp}dp{dp}/ep/weights", parse_spec(raw)


def _weights_query(ident: str, spec: DeepSeekServingSpec) -> dict[str, Any]:
    """The oracle's input: the release's MegaMoE expert class for one rank of ``spec``."""
    facts = model_facts(spec.model)
    geometry = find_geometry(spec.model.name)
    assert geometry is not None and facts.num_routed_experts and facts.hidden_size
    ep = spec.parallelism.tensor_parallel_size * spec.parallelism.data_parallel_size
    return {
        "id": ident,
        "kind": "mega_experts",
        "num_experts": facts.num_routed_experts,
        "num_local_experts": facts.num_routed_experts // ep,
        "top_k": geometry.top_k,
        "hidden_size": facts.hidden_size,
        "intermediate_size": facts.moe_intermediate_size,
    }


def _weights_mismatches(
    release: str, ident: str, spec: DeepSeekServingSpec, answer: dict[str, Any]
) -> list[str]:
    """Our routed-expert bytes per GPU on the MegaMoE path against the parameters the release's
    own expert class creates per rank (times the layers): padding and retained copies are made
    after loading, by DeepGEMM's weight transform, so they are not part of this count."""
    if "error" in answer:
        return [f"[weights] oracle error {answer['error']}: {ident}"]
    geometry = find_geometry(spec.model.name)
    assert geometry is not None
    weights = C.weights_per_gpu(spec, model_facts(spec.model), geometry, release, True)
    assert not isinstance(weights, str), weights
    theirs = answer["bytes"] * geometry.num_layers
    if theirs != weights.routed:
        return [
            f"[weights] routed experts per GPU: vLLM {answer['class']} {theirs} B "
            f"({answer['bytes']} B x {geometry.num_layers} layers), ours {weights.routed} B: {ident}"
        ]
    return []


def _oracle_case(query: Query) -> dict[str, Any]:
    """The oracle's input for one query."""
    spec = query.case.spec
    p = spec.parallelism
    dtype = spec.engine.kv_cache_dtype or "auto"
    out: dict[str, Any] = {
        "id": query.case.id,
        "architecture": V4_ARCH,
        "kv_cache_dtype": dtype,
        "max_model_len": query.length,
        "max_num_batched_tokens": spec.engine.max_num_batched_tokens,
        "tensor_parallel_size": p.tensor_parallel_size,
        "data_parallel_size": p.data_parallel_size,
        "num_speculative_tokens": (spec.engine.speculative_config or {}).get(
            "num_speculative_tokens", 0
        ),
        "available": query.available,
        "async_scheduling": K.async_scheduling(spec.engine.extra_args),
    }
    if spec.model.name == PRO_MODEL:
        out["compress_ratios"] = list(V4_PRO_RATIOS)
    if query.attention_class is not None:
        cc = query.gpus[0].cc_major
        assert cc is not None
        out.update(architecture=V41_ARCH, gpu_capability=[cc, 0])
        if K.kv_family(dtype) == "bf16":
            # vLLM's packed classes refuse bf16: a bf16 cache runs FlashInfer's plain rows.
            out["attention_backend"] = "FLASHINFER_MLA_SPARSE_DSV41"
    return out


def check_capacity(release: str) -> CapacityReport:
    """(f) for one release: every case of the matrix through the oracle and our model."""
    report = CapacityReport()
    proc = run_code(release, PROBE)
    if proc.returncode != 0:
        report.not_covered = (
            f"not proven: vLLM {release} has get_kv_cache_configs in none of "
            f"{', '.join(PLANNER_MODULES)}; the model applies 0.33.0's KV groups to it"
        )
        return report
    cases = list(capacity_cases(release))
    queries = [q for case in cases for q in _queries(case, release)]
    weights = list(weight_cases(release))
    proc = run_module(
        release,
        "conformance.capacity_oracle",
        stdin=json.dumps(
            [_oracle_case(q) for q in queries] + [_weights_query(i, s) for i, s in weights]
        ),
    )
    if proc.returncode != 0:
        report.mismatches.append(f"[capacity] the oracle failed: {proc.stderr[-2000:]}")
        return report
    answers = json.loads(proc.stdout)["answers"]
    report.layouts = len(cases)
    report.v41_layouts = sum(1 for c in cases if c.spec.model.name == V41_MODEL)
    report.pro_layouts = sum(1 for c in cases if c.spec.model.name == PRO_MODEL)
    answers, weight_answers = answers[: len(queries)], answers[len(queries) :]
    for (ident, spec), answer in zip(weights, weight_answers, strict=True):
        report.weight_checks += 1
        report.mismatches.extend(_weights_mismatches(release, ident, spec, answer))
    for query, answer in zip(queries, answers, strict=True):
        where = f"{query.case.id} on {'/'.join(g.product for g in query.gpus)}"
        if "error" in answer:
            report.mismatches.append(f"[capacity] oracle error {answer['error']}: {where}")
            continue
        if query.attention_class not in (None, answer.get("attention_class")):
            report.mismatches.append(
                f"[capacity] attention class: vLLM {answer.get('attention_class')}, ours "
                f"{query.attention_class}: {where}"
            )
            continue
        ours = group_summary(query.groups)
        if answer["groups"] != ours:
            report.mismatches.append(
                f"[capacity] KV groups: vLLM {answer['groups']}, ours {ours}: {where}"
            )
            continue
        report.mismatches.extend(_pool_mismatches(query, answer, where, report))
    return report


def _pool_mismatches(
    query: Query, answer: dict[str, Any], where: str, report: CapacityReport
) -> list[str]:
    """Blocks, blocks per request, concurrency, tokens and refusals of every pool asked about."""
    out = []
    for pool in answer["pools"]:
        report.pools += 1
        if query.attention_class is not None:
            report.v41_pools += 1
        if query.case.spec.model.name == PRO_MODEL:
            report.pro_pools += 1
        _, per_request, blocks = K.kv_blocks(
            query.groups, pool["available"], query.length, query.in_flight, 1, 1
        )
        concurrency = K.pool_concurrency(blocks, per_request)
        if "refused" in pool:
            if concurrency != 0:
                out.append(
                    f"[capacity] {pool['available']} B: vLLM refuses ({pool['refused'][:120]}), "
                    f"we hold {concurrency:.3f} requests: {where}"
                )
            continue
        theirs = (pool["num_blocks"], answer["blocks_per_request"], pool["max_concurrency"])
        mine = (blocks, per_request, concurrency)
        if theirs != mine:
            out.append(
                f"[capacity] {pool['available']} B: vLLM (blocks, per request, concurrency) "
                f"{theirs}, ours {mine}: {where}"
            )
        if pool["tokens"] != int(concurrency * query.length):
            out.append(
                f"[capacity] {pool['available']} B: vLLM {pool['tokens']} tokens, ours "
                f"{int(concurrency * query.length)}: {where}"
            )
    return out
