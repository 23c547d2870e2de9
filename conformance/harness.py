"""`make conformance`: our engine and renderer against each supported vLLM release's own code.

Runs in the operator's virtualenv. For each release it generates a matrix of DeepSeekServings
(models × backends × parallel layouts × engine flags, EPLB redundant experts set through
extraArgs, plus the files in examples/), renders each
one's `vllm serve` argv with OUR renderer, and asks the release's oracle (conformance/oracle.py,
run with the release's virtualenv python in ONE process) about every argv on GPUs of compute
capability 8.0, 9.0, 10.0, 10.3 and 12.0. It then compares:

a. names and sets: catalog/vllm/<release>.json against a fresh export of the release;
b. argv: vLLM's parser, serve validation and `AsyncEngineArgs.from_cli_args` accept every argv we
   render for a backend the release has, and the parsed values equal the spec;
c. guards and SP: per capability, the set of vLLM rules that refuse the configuration equals the
   set of vLLM-rule checks our engine fails, and sequence parallelism on/off agrees;
d. `auto`: vLLM itself never turns `auto` into a MegaMoE backend;
e. multi-node launch: for a replica spanning pods (a LeaderWorkerSet group), the leader's argv and
   the workers' (index 1 and the last) go through vLLM's own `create_engine_config` launch options
   into its `ParallelConfig`: vLLM refuses exactly what our engine refuses, and otherwise each pod
   runs `dataParallelSizeLocal` DP engines starting at DP rank index x local, on
   GPUs-per-pod GPUs, as DP engines (not a multi-node TP/PP worker);
f. capacity (conformance/capacity_oracle.py): for a matrix of V4-Flash layouts (TP / DP / EP,
   kvCacheDtype, maxNumBatchedTokens, maxModelLen, MTP speculative decoding), the KV cache
   groups our capacity model uses equal the groups the release's own cache layers'
   `get_kv_cache_spec()` and planner form
   (layer specs, page bytes, block sizes, windows), and given the same available bytes (our KV
   room on a GB200 and an H200 on both MoE paths, and the one-request boundary) the number of
   blocks, blocks per request and maximum concurrency equal what its `get_kv_cache_configs` and
   `get_max_concurrency_for_kv_cache_config` compute, refusals included
   (conformance/capacity_check.py).

The GB200 nodes (compute capability 10.0) are NVL72 trays in one NVLink clique, so multi-node
MegaMoE is checked against vLLM's guards there; elsewhere our A11 (one NVLink clique, a placement
rule: vLLM has no config-time check for it) keeps it from running.

It prints a table per release and every mismatch with its spec, and exits non-zero on any.
Usage: python -m conformance.harness [--release X ...] [--newest] [--limit N]
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.capacity_check import check_capacity
from conformance.launcher import ROOT, ask, run_module
from deepseek_operator.api.extra_args.eplb import redundant_experts
from deepseek_operator.api.load import parse_spec_types
from deepseek_operator.api.rules.check import SPEC_RULES
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.catalog.models import V41_ARCH, CheckpointFacts, find_checkpoint
from deepseek_operator.catalog.vllm import newest_release, supported_releases, vllm_release
from deepseek_operator.engine.checks import CheckCategory
from deepseek_operator.engine.decision import resolve
from deepseek_operator.engine.resolution import Resolution
from deepseek_operator.names import GFD_CLIQUE
from deepseek_operator.nodes.facts import NodeInventory, build_inventory
from deepseek_operator.render.argv import LEADER_ADDRESS, WORKER_INDEX, PodRole, vllm_args

# One GPU product per compute capability the harness checks (the catalog's exact products).
CAPABILITY_PRODUCTS: dict[tuple[int, int], str] = {
    (8, 0): "NVIDIA-A100-SXM4-80GB",
    (9, 0): "NVIDIA-H200",
    (10, 0): "NVIDIA-GB200",
    (10, 3): "NVIDIA-B300-SXM6-AC",
    (12, 0): "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
}

MODELS = ("deepseek-ai/DeepSeek-V4-Flash", "deepseek-ai/DeepSeek-V4.1-Flash")
# Checkpoint variants a user can describe with spec.model overrides (fp8 experts: V4-Flash-Base).
MODEL_VARIANTS: dict[str, dict[str, Any]] = {
    "": {},
    "fp8-experts": {"expertDtype": "fp8"},
    "topk-not-normalised": {"normTopkProb": False},
}
BACKENDS = (
    "auto",
    "deep_gemm_mega_moe",
    "flashinfer_moe_ep_mega_deep_gemm",
    "flashinfer_moe_ep_cutedsl",
    "flashinfer_moe_ep_mega_cutedsl",
    "flashinfer_trtllm",
    "triton",
)
# (TP, DP, DP-local or None, EP, PP, PCP, DCP, EPLB)
LAYOUTS: tuple[tuple[int, int, int | None, bool, int, int, int, bool], ...] = (
    (4, 1, None, True, 1, 1, 1, False),
    (4, 1, None, False, 1, 1, 1, False),
    (8, 1, None, True, 1, 1, 1, False),
    (2, 2, None, True, 1, 1, 1, False),
    (1, 4, None, True, 1, 1, 1, False),
    (1, 1, None, True, 1, 1, 1, False),
    (4, 2, 1, True, 1, 1, 1, False),
    (5, 1, None, True, 1, 1, 1, False),
    (3, 1, None, True, 1, 1, 1, False),
    (4, 1, None, True, 2, 1, 1, False),
    (4, 1, None, True, 1, 2, 1, False),
    (4, 1, None, True, 1, 1, 2, False),
    (4, 1, None, True, 1, 1, 1, True),
    (2, 1, None, True, 1, 1, 1, True),
)
# Multi-node DP (one LeaderWorkerSet group per replica): (TP, DP, DP-local, EP, EPLB, executor).
MULTI_NODE_LAYOUTS: tuple[tuple[int, int, int, bool, bool, str], ...] = (
    (1, 8, 4, True, False, "mp"),  # DEP8 over two GB200 trays (the rack example)
    (1, 16, 4, True, False, "mp"),  # four trays
    (2, 4, 2, True, False, "mp"),  # TP2 inside each tray
    (1, 8, 4, False, False, "mp"),  # no expert parallelism
    (1, 8, 4, True, True, "mp"),  # EPLB
    (1, 8, 4, True, False, "ray"),  # vLLM refuses --nnodes with the ray executor
)
ENGINE_FLAGS: dict[str, dict[str, Any]] = {
    "": {},
    "speculative": {"speculativeConfig": {"method": "mtp", "num_speculative_tokens": 2}},
    "dbo": {"enableDbo": True},
}

# vLLM's refusal messages → the name of the check of ours that stands for the same rule.
VLLM_RULES: tuple[tuple[str, str], ...] = (
    (r"requires expert parallel|parallel config without expert parallel", "ExpertParallel"),
    (r"sqrtsoftplus", "Routing"),
    (r"normalized top-k", "NormTopkProb"),
    (r"fp4 experts|weight scheme", "ExpertDtype"),
    (r"must be divisible by ep_size|multiples of 128", "Dimensions"),
    (r"requires SM100|compute capability|current device", "GPUArchitecture"),
    (r"only supported for DeepSeek-V4", "FlashInferArchitecture"),
    (r"EPLB is not supported with moe_backend|does not support[^.]*\bEPLB\b", "FlashInferEPLB"),
    (r"but EPLB is not enabled|must be True to use EPLB|EPLB requires tensor", "EPLBSettings"),
    (
        r"even distribution of experts|must be divisible by tp_size|"
        r"Redundant experts are only supported with EPLB",
        "FusedMoEExperts",
    ),
    (r"dual batch overlap", "FlashInferMicrobatching"),
    (r"PCP currently requires", "ContextParallel"),
    (r"all2all", "All2All"),
    (r"nnodes > 1 can only be set", "MultiNodeExecutor"),
)


def vllm_rules(message: str) -> set[str]:
    """The names of our checks for one vLLM refusal message (a FlashInfer kernel lists several
    reasons in one); {'Unmapped:<message>'} when none matches."""
    names = {name for pattern, name in VLLM_RULES if re.search(pattern, message)}
    return names or {"Unmapped:" + message[:80]}


@dataclass(frozen=True)
class Case:
    """One generated DeepSeekServing."""

    id: str
    raw: dict[str, Any]


def _node(name: str, product: str, cc: tuple[int, int]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.compute.major": str(cc[0]),
                "nvidia.com/gpu.compute.minor": str(cc[1]),
                "nvidia.com/gpu.count": "8",
                "nvidia.com/gpu.memory": str(4 * 1024 * 1024),  # never the limit here
            },
        },
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


# GB200 trays are NVL72 compute trays: all of them in one multi-node NVLink clique.
NVL72_CLIQUE = {GFD_CLIQUE: "4b1e9c7a-2f3d-4e5f-8a9b-0c1d2e3f4a5b.1"}


def inventory(cc: tuple[int, int]) -> NodeInventory:
    """Plenty of 8-GPU nodes of one product, so only vLLM's rules can refuse."""
    product = CAPABILITY_PRODUCTS[cc]
    nodes = [_node(f"node-{i}", product, cc) for i in range(64)]
    if cc == (10, 0):
        for node in nodes:
            node["metadata"]["labels"].update(NVL72_CLIQUE)
    return build_inventory(nodes)


def _layouts() -> Iterator[tuple[int, int, int | None, bool, int, int, int, bool, str]]:
    """Every single-node layout (mp executor) and every multi-node one."""
    for layout in LAYOUTS:
        yield (*layout, "mp")
    for tp, dp, dp_local, ep, eplb, executor in MULTI_NODE_LAYOUTS:
        yield tp, dp, dp_local, ep, 1, 1, 1, eplb, executor


def generated_cases() -> Iterator[Case]:
    """The matrix: models × variants × backends × layouts × engine flags."""
    for model, (variant, overrides), backend, layout, (flags, engine) in itertools.product(
        MODELS, MODEL_VARIANTS.items(), BACKENDS, list(_layouts()), ENGINE_FLAGS.items()
    ):
        tp, dp, dp_local, ep, pp, pcp, dcp, eplb, executor = layout
        parallelism: dict[str, Any] = {
            "tensorParallelSize": tp,
            "dataParallelSize": dp,
            "expertParallel": ep,
            "pipelineParallelSize": pp,
            "prefillContextParallelSize": pcp,
            "decodeContextParallelSize": dcp,
            "enableEplb": eplb,
            "distributedExecutorBackend": executor,
        }
        if dp_local is not None:
            parallelism["dataParallelSizeLocal"] = dp_local
        raw = {
            "model": {"name": model, **overrides},
            "image": "vllm/vllm-openai:latest",
            "moeBackend": backend,
            "parallelism": parallelism,
            "engine": dict(engine),
        }
        short = model.rsplit("/", 1)[-1]
        ident = f"{short}{'/' + variant if variant else ''}/{backend}/tp{tp}dp{dp}" + (
            f"l{dp_local}" if dp_local else ""
        )
        ident += ("/ep" if ep else "") + (f"/pp{pp}" if pp > 1 else "")
        ident += (f"/pcp{pcp}" if pcp > 1 else "") + (f"/dcp{dcp}" if dcp > 1 else "")
        ident += ("/eplb" if eplb else "") + (f"/{executor}" if executor != "mp" else "")
        ident += f"/{flags}" if flags else ""
        yield Case(ident, raw)


# EPLB redundant experts set through extraArgs (api/extra_args/eplb.py), in the spellings a spec may use, and
# the parser's precedence: a later --eplb-config replaces the whole config, dotted keys win.
REDUNDANT_SPELLINGS: dict[str, list[str]] = {
    "": [],
    "dotted2": ["--eplb-config.num_redundant_experts=2"],
    "json4": ['--eplb-config={"num_redundant_experts": 4, "window_size": 100}'],
    "next8": ["--eplb-config", '{"window_size": 100, "num_redundant_experts": 8}'],
    "replaced": ['--eplb-config={"num_redundant_experts": 3}', '--eplb-config={"window_size": 9}'],
    "dotted-wins": ["--eplb-config.num_redundant_experts=4", '--eplb_config={"window_size": 9}'],
    "dotted-resets": ["--eplb-config", '{"num_redundant_experts": 8}', "--eplb-config.use_async=0"],
}
# (TP, DP, EP, EPLB): EP groups of 4, 3 and 8 GPUs; EPLB off; EPLB without EP; EPLB on one GPU.
REDUNDANT_LAYOUTS: tuple[tuple[int, int, bool, bool], ...] = (
    (4, 1, True, True),
    (3, 1, True, True),
    (4, 2, True, True),
    (4, 1, True, False),
    (4, 1, False, True),
    (1, 1, True, True),
)


def redundant_expert_cases() -> Iterator[Case]:
    """Models x backends x EPLB layouts x redundant-expert spellings (speculative decoding on V4.1,
    whose DSpark draft layers divide their own experts)."""
    for model, backend, (tp, dp, ep, eplb), (spelling, extra) in itertools.product(
        MODELS, BACKENDS, REDUNDANT_LAYOUTS, REDUNDANT_SPELLINGS.items()
    ):
        engine: dict[str, Any] = {"extraArgs": extra}
        if model.endswith("V4.1-Flash") and spelling in ("", "json4"):
            engine["speculativeConfig"] = {"method": "mtp", "num_speculative_tokens": 2}
        raw = {
            "model": {"name": model},
            "image": "vllm/vllm-openai:latest",
            "moeBackend": backend,
            "parallelism": {
                "tensorParallelSize": tp,
                "dataParallelSize": dp,
                "expertParallel": ep,
                "enableEplb": eplb,
            },
            "engine": engine,
        }
        short = model.rsplit("/", 1)[-1]
        ident = (
            f"{short}/{backend}/tp{tp}dp{dp}" + ("/ep" if ep else "") + ("/eplb" if eplb else "")
        )
        ident += f"/redundant:{spelling or 'none'}" + (
            "/spec" if "speculativeConfig" in engine else ""
        )
        yield Case(ident, raw)


def example_cases() -> Iterator[Case]:
    """Every aggregated DeepSeekServing under examples/.

    A disaggregated example is decided per role (its roles' layouts, backends and extraArgs),
    which this spec-level matrix cannot express: the P/D harness checks those
    (:func:`conformance.pd_harness.example_cases`).
    """
    for path, doc in example_servings():
        if "disaggregation" not in doc["spec"]:
            yield Case(f"examples/{path.name}", doc["spec"])


def example_servings() -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every DeepSeekServing document under examples/, with its file."""
    import yaml

    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "DeepSeekServing":
                yield path, doc


# Our admission rules (CEL + pydantic) → the check name standing for the same vLLM rule.
STATIC_RULES = {
    "MegaMoERequiresExpertParallel": "ExpertParallel",
    "FlashInferMoEEPRejectsEPLB": "FlashInferEPLB",
}


def parse_unchecked(raw: dict[str, Any]) -> tuple[DeepSeekServingSpec, set[str]]:
    """The spec without our admission rules, and the names of those it breaks (so that a spec we
    refuse at admission is still rendered and compared with vLLM's own refusal)."""
    spec = parse_spec_types(raw)
    broken = {STATIC_RULES.get(r.name, r.name) for r in SPEC_RULES if not r.holds(spec)}
    return spec, broken


def model_config(spec: DeepSeekServingSpec, facts: CheckpointFacts | None) -> dict[str, Any]:
    """The checkpoint config values the oracle's mock hf_config carries."""
    m = spec.model

    def pick(override: Any, name: str, default: Any) -> Any:
        if override is not None:
            return override
        return getattr(facts, name) if facts is not None else default

    return {
        "architecture": pick(m.architecture, "architecture", V41_ARCH),
        "hidden_size": pick(m.hidden_size, "hidden_size", 4096),
        "moe_intermediate_size": pick(m.moe_intermediate_size, "moe_intermediate_size", 2048),
        "n_routed_experts": pick(m.num_routed_experts, "num_routed_experts", 256),
        "expert_dtype": pick(m.expert_dtype, "expert_dtype", "fp4"),
        "scoring_func": pick(m.scoring_func, "scoring_func", "sqrtsoftplus"),
        "norm_topk_prob": pick(m.norm_topk_prob, "norm_topk_prob", True),
        "num_draft_routed_experts": pick(
            m.num_draft_routed_experts, "num_draft_routed_experts", None
        ),
    }


@dataclass
class Rendered:
    """Our side of one case on one GPU capability."""

    resolution: Resolution
    # (LeaderWorkerSet index, argv) per pod checked: the head (0), and for a multi-pod replica
    # the headless workers 1 and pods-1.
    argv: list[tuple[int, list[str]]]
    admission: set[str] = field(default_factory=set)  # our admission rules the spec breaks


LEADER_IP = "10.0.0.1"


def pod_env(index: int) -> dict[str, str]:
    """What Kubernetes substitutes for the $(VAR) references the pod of LWS index `index` has."""
    return {LEADER_ADDRESS: LEADER_IP, WORKER_INDEX: str(index)}


def render(spec: DeepSeekServingSpec, cc: tuple[int, int]) -> Rendered:
    """Decide on `cc` nodes and render the argv of the head pod (and the first and last worker
    pods), with the pod environment references expanded as Kubernetes would."""
    # The argv does not depend on the layout advice: leave its alternative decisions out.
    res = resolve(spec, inventory(cc), advise=False)
    indexes = sorted({0, *([1, res.pods_per_replica - 1] if res.pods_per_replica > 1 else [])})
    argv = []
    for index in indexes:
        env = pod_env(index)
        role = PodRole(leader=index == 0)
        argv.append((index, ["serve", *(env.get(a, a) for a in vllm_args(spec, res, role))]))
    return Rendered(res, argv)


# Our checks that are placement rules of the operator, not vLLM's (multi-node NVLink cliques).
NOT_VLLM_RULES = frozenset({"NVLinkClique"})


def our_refusals(rendered: Rendered) -> set[str]:
    """Our admission refusals, and when our decision says the backend cannot run, the vLLM-rule
    checks it failed (spec and node rules; not memory fit or placement)."""
    res = rendered.resolution
    failed = set()
    if not res.backend_runnable:
        failed = {
            c.name
            for c in res.checks
            if not c.passed
            and c.category in (CheckCategory.SPEC, CheckCategory.NODES)
            and c.name not in NOT_VLLM_RULES
        }
    return failed | rendered.admission


@dataclass
class ReleaseReport:
    """The outcome for one release."""

    release: str
    cases: int = 0
    argv_checked: int = 0
    guard_checks: int = 0
    launch_checks: int = 0
    mismatches: list[str] = field(default_factory=list)
    seconds: float = 0.0


def run_oracle(release: str, queries: list[dict[str, Any]]) -> dict[str, Any]:
    """Ask the release's own code about every query, in one process."""
    return ask(release, "conformance.oracle", queries)


def parsed_mismatches(
    spec: DeepSeekServingSpec, res: Resolution, parsed: dict[str, Any], index: int
) -> list[str]:
    """Values vLLM read that differ from what the spec says."""
    p = spec.parallelism
    expected = {
        "moe_backend": res.moe_backend,
        "tensor_parallel_size": p.tensor_parallel_size,
        "pipeline_parallel_size": p.pipeline_parallel_size,
        "data_parallel_size": p.data_parallel_size,
        "prefill_context_parallel_size": p.prefill_context_parallel_size,
        "decode_context_parallel_size": p.decode_context_parallel_size,
        "enable_expert_parallel": p.expert_parallel,
        "enable_eplb": p.enable_eplb,
        "num_redundant_experts": redundant_experts(spec.engine.extra_args),
        "headless": index > 0,
        "speculative_config": spec.engine.speculative_config,
        "enable_dbo": spec.engine.enable_dbo,
    }
    if res.pods_per_replica > 1:
        expected["data_parallel_size_local"] = p.dp_local
        expected["nnodes"] = res.pods_per_replica
        expected["node_rank"] = index
        expected["data_parallel_address"] = LEADER_IP
    out = []
    for key, want in expected.items():
        got = parsed.get(key)
        if got != want:
            out.append(f"{key}: vLLM read {got!r}, spec says {want!r}")
    return out


def launch_rules(answer: dict[str, Any]) -> set[str]:
    """Our check names for vLLM's refusal of a multi-node launch (empty when it launches)."""
    refusal = (answer.get("launch") or {}).get("refusal")
    return vllm_rules(refusal["message"]) if refusal else set()


def launch_mismatches(
    spec: DeepSeekServingSpec, rendered: Rendered, launch: dict[str, Any], index: int
) -> list[str]:
    """(e): vLLM's multi-node launch of the pod of LWS index `index` against our decision."""
    res = rendered.resolution
    if "oracle_error" in launch:
        return [f"[oracle] launch: {launch['oracle_error']}"]
    ours = {c.name for c in res.checks if not c.passed and c.name == "MultiNodeExecutor"}
    if "refusal" in launch:
        theirs = vllm_rules(launch["refusal"]["message"])
        if not theirs & ours:
            return [
                f"[launch] pod {index}: vLLM refuses {sorted(theirs)}, we refuse {sorted(ours) or 'nothing'}"
            ]
        return []
    if ours:
        return [f"[launch] pod {index}: vLLM launches it, we refuse {sorted(ours)}"]
    p = spec.parallelism
    per_rank = p.tensor_parallel_size * p.pipeline_parallel_size * p.prefill_context_parallel_size
    expected = {
        "data_parallel_rank": index * p.dp_local,
        "data_parallel_size_local": p.dp_local,
        "world_size": per_rank,
        "local_world_size": per_rank,
        "nnodes_within_dp": 1,
        "node_rank_within_dp": 0,  # > 0 would make a headless pod a multi-node TP/PP worker
    }
    out = [
        f"[launch] pod {index}: vLLM {key} {launch.get(key)!r}, ours {want!r}"
        for key, want in expected.items()
        if launch.get(key) != want
    ]
    if (
        launch.get("local_world_size", 0) * launch.get("data_parallel_size_local", 0)
        != res.gpus_per_pod
    ):
        out.append(
            f"[launch] pod {index}: vLLM runs {launch.get('data_parallel_size_local')} engine(s) "
            f"of {launch.get('local_world_size')} GPU(s), our pod has {res.gpus_per_pod} GPUs"
        )
    return out


def check_release(release: str, cases: list[Case]) -> ReleaseReport:
    """Everything (a)-(d) for one release."""
    t0 = time.monotonic()
    report = ReleaseReport(release)
    data = vllm_release(release)
    capabilities = list(CAPABILITY_PRODUCTS)
    queries: list[dict[str, Any]] = []
    expectations: list[tuple[Case, DeepSeekServingSpec, dict[tuple[int, int], Rendered], int]] = []
    for case in cases:
        # The spec names the release it is checked against (as a user of that image would).
        case = Case(case.id, {**case.raw, "vllmVersion": release})
        spec, admission = parse_unchecked(case.raw)
        facts = find_checkpoint(spec.model.name)
        rendered = {cc: render(spec, cc) for cc in capabilities}
        for r in rendered.values():
            r.admission = admission
        model = model_config(spec, facts)
        # The argv does not depend on the GPU except through the decision (auto may resolve).
        by_argv: dict[str, list[tuple[int, int]]] = {}
        for cc, r in rendered.items():
            by_argv.setdefault(json.dumps(r.argv), []).append(cc)
        for argv_key, ccs in by_argv.items():
            for index, argv in json.loads(argv_key):
                queries.append(
                    {
                        "id": f"{case.id}#{len(queries)}",
                        "argv": argv,
                        "model": model,
                        "capabilities": [list(cc) for cc in ccs] if index == 0 else [],
                    }
                )
                expectations.append((case, spec, {cc: rendered[cc] for cc in ccs}, index))
        if spec.moe_backend == "auto":
            # (d): the same spec with auto left to vLLM.
            argv = rendered[(10, 0)].argv[0][1]
            at = argv.index("--moe-backend")
            queries.append(
                {
                    "id": f"{case.id}#auto",
                    "argv": [*argv[:at], "--moe-backend", "auto", *argv[at + 2 :]],
                    "model": model,
                    "capabilities": [[10, 0]],
                }
            )
            expectations.append((case, spec, {}, -1))
    report.cases = len(cases)
    answers = run_oracle(release, queries)["answers"]
    for (case, spec, rendered, role), answer in zip(expectations, answers, strict=True):
        where = f"{case.id} {json.dumps(case.raw, separators=(',', ':'))}"
        if role == -1:
            backend = (answer.get("parsed") or {}).get("moe_backend")
            sp = [g.get("sequence_parallel") for g in answer.get("guards", [])]
            if backend in data.mega_moe_backends:
                report.mismatches.append(f"[auto] vLLM turned auto into {backend}: {where}")
            report.guard_checks += 1
            del sp
            continue
        first = next(iter(rendered.values()))
        res = first.resolution
        report.argv_checked += 1
        we_refuse_name = "KnownMoEBackend" in first.admission or any(
            c.name == "KnownMoEBackend" and not c.passed for c in res.checks
        )
        if not answer["accepted"]:
            if not we_refuse_name:
                report.mismatches.append(
                    f"[argv] vLLM refused our argv ({answer['error']['message'][:160]}); "
                    f"we accept the spec: {where}"
                )
            continue
        if we_refuse_name:
            report.mismatches.append(
                f"[argv] vLLM accepts backend {res.moe_backend}, we refuse the name: {where}"
            )
        for problem in parsed_mismatches(spec, res, answer["parsed"], role):
            report.mismatches.append(f"[parsed] {problem}: {where}")
        if "launch" in answer:
            report.launch_checks += 1
            for problem in launch_mismatches(spec, first, answer["launch"], role):
                report.mismatches.append(f"{problem}: {where}")
        # A refused launch stops vLLM before any model guard runs.
        refused_launch = launch_rules(answer)
        for result in answer.get("guards", []):
            cc = (result["capability"][0], result["capability"][1])
            report.guard_checks += 1
            if "oracle_error" in result:
                report.mismatches.append(f"[oracle] {cc}: {result['oracle_error']}: {where}")
                continue
            theirs = set().union(*(vllm_rules(r["message"]) for r in result["refusals"]))
            theirs |= refused_launch
            r = rendered[cc]
            ours = our_refusals(r)
            # vLLM stops at the first guard that raises in each constructor, we report every check
            # that fails: they agree when both refuse, on at least one common rule, or neither does.
            if bool(theirs) != bool(ours) or (theirs and not theirs & ours):
                report.mismatches.append(
                    f"[guards] CC {cc[0]}.{cc[1]} backend {r.resolution.moe_backend}: vLLM refuses "
                    f"{sorted(theirs) or 'nothing'}, we refuse {sorted(ours) or 'nothing'}: {where}"
                )
            if bool(result["sequence_parallel"]) != r.resolution.sequence_parallel:
                report.mismatches.append(
                    f"[sp] CC {cc[0]}.{cc[1]}: vLLM sequence parallel {result['sequence_parallel']}, "
                    f"ours {r.resolution.sequence_parallel}: {where}"
                )
    report.seconds = time.monotonic() - t0
    return report


def names_and_sets(release: str) -> list[str]:
    """(a): the shipped catalog file equals a fresh export of the installed release."""
    proc = run_module(release, "conformance.extract", "--out", "-")
    if proc.returncode != 0:
        return [f"[names] the extractor failed: {proc.stderr[-2000:]}"]
    fresh = json.loads(proc.stdout)
    shipped = json.loads(
        (ROOT / "operator/deepseek_operator/catalog/vllm" / f"{release}.json").read_text()
    )
    return [
        f"[names] catalog/vllm/{release}.json {key} differs from the installed release (make vllm-catalog)"
        for key in sorted(set(fresh) | set(shipped))
        if fresh.get(key) != shipped.get(key)
    ]


def print_report(report: ReleaseReport, limit: int) -> None:
    """The table row and the mismatches of one release."""
    print(
        f"vLLM {report.release:8} specs {report.cases:5}  argv {report.argv_checked:5}  "
        f"guard/SP checks {report.guard_checks:6}  launch {report.launch_checks:4}  mismatches {len(report.mismatches):4}  "
        f"({report.seconds:.0f}s)"
    )
    for line in report.mismatches[:limit]:
        print("  " + line)
    if len(report.mismatches) > limit:
        print(f"  ... {len(report.mismatches) - limit} more (--limit)")


def main(argv: Iterable[str] | None = None) -> int:
    """Check the releases asked for; non-zero exit on any mismatch."""
    parser = argparse.ArgumentParser(description="conformance with the real vLLM")
    parser.add_argument("--release", action="append", help="a supported release (repeatable)")
    parser.add_argument("--newest", action="store_true", help="only the newest supported release")
    parser.add_argument("--limit", type=int, default=40, help="mismatches printed per release")
    parser.add_argument(
        "--capacity-only",
        action="store_true",
        help="only (f), the capacity matrix (the other checks take most of a release's time)",
    )
    options = parser.parse_args(list(argv) if argv is not None else None)
    releases = options.release or (
        [newest_release()] if options.newest else list(supported_releases())
    )
    for release in releases:
        if release not in supported_releases():
            print(f"error: vLLM {release} is not supported ({', '.join(supported_releases())})")
            return 2
    cases = (
        []
        if options.capacity_only
        else list(example_cases()) + list(generated_cases()) + list(redundant_expert_cases())
    )
    failed = False
    for release in releases:
        if not options.capacity_only:
            report = check_release(release, cases)
            report.mismatches[:0] = names_and_sets(release)
            print_report(report, options.limit)
            failed |= bool(report.mismatches)
        t0 = time.monotonic()
        capacity = check_capacity(release)
        if capacity.not_covered:
            print(f"vLLM {release:8} capacity {capacity.not_covered}")
            continue
        print(
            f"vLLM {release:8} capacity layouts {capacity.layouts:4}  pools {capacity.pools:5}  "
            f"mismatches {len(capacity.mismatches):4}  ({time.monotonic() - t0:.0f}s; "
            f"of which V4.1-Flash {capacity.v41_layouts} layouts, {capacity.v41_pools} pools; "
            f"of which V4-Pro {capacity.pro_layouts} layouts, {capacity.pro_pools} pools; "
            f"MegaMoE routed-expert weights {capacity.weight_checks} layouts; "
            "PP/DCP and V4.1 speculative decoding not covered)"
        )
        for line in capacity.mismatches[: options.limit]:
            print("  " + line)
        failed |= bool(capacity.mismatches)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
