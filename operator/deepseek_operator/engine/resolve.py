"""The backend decision: ``resolve(spec, inventory)`` → :class:`Resolution`.

An ordered chain of checks mirrors vLLM's rules (vllm-rules.md):

* ``auto`` becomes ``deep_gemm_mega_moe`` only when every rule R2–R14 holds (the reconstructed
  rules of vLLM PR #57220, scoped to DeepSeek V4.1) AND the SM100, fully NVLink-connected nodes
  can hold every replica. Otherwise it stays ``auto`` and the first failing check is the reason.
* An explicit backend is kept verbatim and checked against vLLM's hard guards (A1–A10 for the
  MegaMoE backends, the MXFP4 oracle's map for the others). A failing guard makes the backend
  unrunnable: ``BackendResolved=False`` and the pods are pinned to nodes where it would run.
* Sequence parallelism follows vLLM's ``_use_sequence_parallel`` exactly.
* Stability: with ``previous`` (the backend running for this same spec), node churn changes the
  decision only when no eligible node is left for it; a better decision is only reported.

Every check is evaluated (the chain never short-circuits), so the status shows them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from deepseek_operator.api.backends import (
    AUTO,
    DEEP_GEMM_MEGA_MOE,
    FLASHINFER_MOE_EP_ARCHITECTURES,
    FLASHINFER_MOE_EP_BACKENDS,
    FLASHINFER_MOE_EP_MEGA_CUTEDSL,
    MEGA_MOE_BACKENDS,
)
from deepseek_operator.api.rules import VLLM_MEGA_MOE_REQUIRES_EP
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.api.status import Check
from deepseek_operator.catalog.models import V4_ARCH, V41_ARCH
from deepseek_operator.engine.facts import ModelFacts, model_facts
from deepseek_operator.engine.placement import (
    NodeRequirement,
    Placement,
    Requirement,
    candidates,
    place,
)
from deepseek_operator.names import (
    REASON_EXPLICIT,
    REASON_KEPT_AUTO,
    REASON_MEGA_MOE_SELECTED,
    failed_reason,
)
from deepseek_operator.nodes.facts import NodeFacts, NodeInventory
from deepseek_operator.nodes.precedence import SOURCE_PRODUCT

# vLLM's exact guard messages (vllm-rules.md §4).
VLLM_SQRTSOFTPLUS_ONLY = "DeepSeek V4 MegaMoE currently supports sqrtsoftplus routing only."
VLLM_SM100_ONLY = "DeepGEMM MegaMoE requires SM100 GPUs."
VLLM_DIMS_128 = "DeepGEMM MegaMoE requires hidden and intermediate sizes to be multiples of 128."

# Backends the MXFP4 oracle maps (``map_mxfp4_backend``, newest version, vllm-rules.md §1.3).
MXFP4_EXPLICIT_BACKENDS: frozenset[str] = frozenset(
    {
        "flashinfer_trtllm",
        "flashinfer_cutlass",
        "triton",
        "marlin",
        "aiter",
        "emulation",
        "deep_gemm",
        "triton_unfused",
        "humming",
    }
)


@dataclass(frozen=True)
class PreviousDecision:
    """The backend already running for this same spec (same generation)."""

    moe_backend: str
    reason: str
    serving: bool = False  # some replica of it is ready: changing it would restart live pods


@dataclass(frozen=True)
class Resolution:
    """Everything the renderer and the status need from the decision."""

    requested: str
    moe_backend: str
    reason: str  # decision reason: MegaMoESelected, Explicit or <Check>Failed
    condition_reason: (
        str  # BackendResolved reason: MegaMoESelected, KeptAuto, Explicit, <Check>Failed
    )
    message: str
    backend_runnable: bool
    sequence_parallel: bool
    expert_parallel_size: int
    gpus_per_pod: int
    pods_per_replica: int
    replicas: int
    requirement: NodeRequirement
    placement: Placement
    checks: tuple[Check, ...]
    model: ModelFacts

    @property
    def eligible_nodes(self) -> tuple[str, ...]:
        """Names of the nodes where the decision holds and a pod fits."""
        return self.placement.eligible

    @property
    def failed_checks(self) -> list[Check]:
        """The checks that did not pass, in order."""
        return [c for c in self.checks if not c.passed]


def expert_parallel_size(spec: DeepSeekServingSpec) -> int:
    """EP size = TP × DP when expert parallel is on (vLLM ``--enable-expert-parallel``), else 1."""
    p = spec.parallelism
    return p.tensor_parallel_size * p.data_parallel_size if p.expert_parallel else 1


def gpus_per_pod(spec: DeepSeekServingSpec) -> int:
    """GPUs one pod requests: TP × PP × local DP × PCP (design.md §5)."""
    p = spec.parallelism
    return (
        p.tensor_parallel_size
        * p.pipeline_parallel_size
        * p.dp_local
        * p.prefill_context_parallel_size
    )


def pods_per_replica(spec: DeepSeekServingSpec) -> int:
    """Pods in one serving replica: DP / local DP (1 unless remote DP is asked for)."""
    p = spec.parallelism
    return p.data_parallel_size // p.dp_local


def sequence_parallel(spec: DeepSeekServingSpec, backend: str) -> bool:
    """vLLM's ``_use_sequence_parallel`` for DeepSeek V4/V4.1 (vllm-rules.md §3.2)."""
    p = spec.parallelism
    return (
        p.pipeline_parallel_size == 1
        and p.expert_parallel
        and p.tensor_parallel_size > 1
        and (backend in MEGA_MOE_BACKENDS or p.data_parallel_size > 1)
    )


def _check(name: str, rule: str, passed: bool, message: str) -> Check:
    return Check(name=name, rule=rule, passed=passed, message=message)


def _describe(nodes: Sequence[NodeFacts]) -> str:
    """'NVIDIA-GB200, CC 10.0' style summary of the products among ``nodes``."""
    seen: dict[str, str] = {}
    for n in nodes:
        seen.setdefault(n.product or "unknown product", n.cc_text)
    return "; ".join(f"{p}, CC {cc}" for p, cc in sorted(seen.items()))


def _source_note(nodes: Sequence[NodeFacts], attr: str, missing: str) -> str:
    inferred = [n for n in nodes if getattr(n, attr) == SOURCE_PRODUCT]
    if not inferred:
        return ""
    return f"; {len(inferred)} of them inferred from product ({missing})"


# --- the individual checks -------------------------------------------------------------------


def _check_architecture(facts: ModelFacts) -> Check:
    arch = facts.architecture
    if arch == V41_ARCH:
        return _check(
            "ModelArchitecture",
            "R2",
            True,
            f"{arch} is DeepSeek V4.1 ({facts.source('architecture')})",
        )
    if arch == V4_ARCH:
        return _check(
            "ModelArchitecture",
            "R2",
            False,
            f"{arch} is DeepSeek V4; automatic MegaMoE is scoped to V4.1 (vLLM PR #57220). "
            "The V4 recipe sets it explicitly on Blackwell: set spec.moeBackend: "
            "deep_gemm_mega_moe (with expertParallel) to use it",
        )
    if arch is None:
        return _check(
            "ModelArchitecture",
            "R2",
            False,
            f"architecture unknown: {facts.name!r} is not in the catalog and "
            "spec.model.architecture is not set",
        )
    return _check("ModelArchitecture", "R2", False, f"{arch} is not DeepSeek V4.1 ({V41_ARCH})")


def _check_gpu_architecture(cands: Sequence[NodeFacts], rule: str, vllm_msg: str = "") -> Check:
    sm100 = [n for n in cands if n.is_sm100]
    if not cands:
        return _check(
            "GPUArchitecture",
            rule,
            False,
            "no candidate GPU nodes" + (f". vLLM: {vllm_msg}" if vllm_msg else ""),
        )
    others = [n for n in cands if not n.is_sm100]
    message = f"{len(sm100)}/{len(cands)} candidate nodes are SM100"
    if sm100:
        message += (
            f" ({_describe(sm100)}){_source_note(sm100, 'cc_source', 'no agent or CC labels')}"
        )
    if others:
        message += f"; not SM100: {_describe(others)}"
    if not sm100 and vllm_msg:
        message += f". vLLM: {vllm_msg}"
    return _check("GPUArchitecture", rule, bool(sm100), message)


def _check_deep_gemm(spec: DeepSeekServingSpec) -> Check:
    raw = spec.env_value("VLLM_USE_DEEP_GEMM")
    declared = any(e.get("name") == "VLLM_USE_DEEP_GEMM" for e in spec.env)
    if declared and raw is None:
        return _check(
            "DeepGEMM",
            "R4",
            False,
            "VLLM_USE_DEEP_GEMM comes from valueFrom, so it cannot be verified before the pod starts",
        )
    if raw is not None and raw.strip() in ("0", "false", "False", ""):
        return _check(
            "DeepGEMM", "R4", False, f"DeepGEMM disabled in spec.env (VLLM_USE_DEEP_GEMM={raw!r})"
        )
    shown = (
        f"VLLM_USE_DEEP_GEMM={raw!r}" if raw is not None else "VLLM_USE_DEEP_GEMM unset (default 1)"
    )
    return _check(
        "DeepGEMM",
        "R4",
        True,
        f"DeepGEMM enabled: {shown}; the image must ship DeepGEMM (vLLM images do)",
    )


def _check_expert_dtype(facts: ModelFacts, rule: str) -> Check:
    dtype = facts.expert_dtype
    if dtype == "fp4":
        return _check(
            "ExpertDtype",
            rule,
            True,
            f"routed experts are fp4 (MXFP4) ({facts.source('expert_dtype')})",
        )
    if dtype is None:
        return _check(
            "ExpertDtype", rule, False, "expert dtype unknown: set spec.model.expertDtype"
        )
    return _check(
        "ExpertDtype",
        rule,
        False,
        f"routed experts are {dtype} ({facts.source('expert_dtype')}). vLLM: DeepSeek V4 MegaMoE only supports fp4 experts; got expert_dtype={dtype!r}.",
    )


def _check_routing(facts: ModelFacts, rule: str) -> Check:
    func = facts.scoring_func
    if func == "sqrtsoftplus":
        return _check(
            "Routing", rule, True, f"scoring function sqrtsoftplus ({facts.source('scoring_func')})"
        )
    if func is None:
        return _check(
            "Routing", rule, False, "scoring function unknown: set spec.model.scoringFunc"
        )
    return _check(
        "Routing", rule, False, f"scoring function {func!r}. vLLM: {VLLM_SQRTSOFTPLUS_ONLY}"
    )


def _check_dimensions(facts: ModelFacts, spec: DeepSeekServingSpec, ep: int, rule: str) -> Check:
    h, i, e = facts.hidden_size, facts.moe_intermediate_size, facts.num_routed_experts
    if h is None or i is None or e is None:
        missing = [
            n
            for n, v in (("hiddenSize", h), ("moeIntermediateSize", i), ("numRoutedExperts", e))
            if v is None
        ]
        return _check(
            "Dimensions",
            rule,
            False,
            "model dimensions unknown: set spec.model." + ", spec.model.".join(missing),
        )
    problems: list[str] = []
    if h % 128 or i % 128:
        problems.append(
            f"hidden {h} / MoE intermediate {i} not multiples of 128 (vLLM: {VLLM_DIMS_128})"
        )
    if e % ep:
        problems.append(f"n_physical_experts={e} must be divisible by ep_size={ep}")
    draft = facts.num_draft_routed_experts
    if spec.engine.speculative_config is not None and draft is not None and draft % ep:
        problems.append(f"draft experts {draft} must be divisible by ep_size={ep}")
    detail = f"hidden {h}, MoE intermediate {i}, {e} routed experts, EP size {ep}"
    if spec.engine.speculative_config is not None and draft is not None:
        detail += f", {draft} draft experts"
    if problems:
        return _check("Dimensions", rule, False, detail + ": " + "; ".join(problems))
    return _check("Dimensions", rule, True, detail + ": multiples of 128 and divisible")


def _check_expert_parallel(spec: DeepSeekServingSpec, ep: int, rule: str, need_two: bool) -> Check:
    if not spec.parallelism.expert_parallel:
        return _check(
            "ExpertParallel",
            rule,
            False,
            "expert parallel is off. vLLM: " + VLLM_MEGA_MOE_REQUIRES_EP,
        )
    if need_two and ep < 2:
        return _check(
            "ExpertParallel",
            rule,
            False,
            f"EP size {ep} (TP x DP): a local EP group needs at least 2 GPUs",
        )
    return _check("ExpertParallel", rule, True, f"expert parallel on, EP size {ep} (TP x DP)")


def _checks_layout(spec: DeepSeekServingSpec) -> list[Check]:
    p, e = spec.parallelism, spec.engine
    out = [
        _check(
            "NoPipelineOrContextParallel",
            "R9",
            p.pipeline_parallel_size == 1
            and p.decode_context_parallel_size == 1
            and p.prefill_context_parallel_size == 1,
            f"PP {p.pipeline_parallel_size}, DCP {p.decode_context_parallel_size}, PCP {p.prefill_context_parallel_size} (all must be 1)",
        ),
        _check(
            "LocalDataParallel",
            "R10",
            p.dp_local == p.data_parallel_size,
            f"DP {p.data_parallel_size}, DP local {p.dp_local}"
            + (
                " (all ranks in one pod)"
                if p.dp_local == p.data_parallel_size
                else " (remote DP ranks)"
            ),
        ),
        _check(
            "NotRay",
            "R11",
            p.distributed_executor_backend != "ray",
            f"distributed executor backend {p.distributed_executor_backend}",
        ),
        _check(
            "NoSpeculativeDecoding",
            "R12",
            e.speculative_config is None,
            "speculative decoding off"
            if e.speculative_config is None
            else f"speculative decoding on ({e.speculative_config.get('method', 'unknown method')})",
        ),
        _check(
            "NoMicrobatching",
            "R13",
            not e.enable_dbo and e.ubatch_size <= 1,
            f"enableDbo {str(e.enable_dbo).lower()}, ubatchSize {e.ubatch_size}",
        ),
    ]
    return out


def _check_nvlink(sm100: Sequence[NodeFacts], placement: Placement, gpp: int) -> Check:
    connected = [n for n in sm100 if n.nvlink_fully_connected]
    fits = placement.eligible
    if not sm100:
        return _check("NVLinkFullyConnected", "R14", False, "no SM100 candidate node to check")
    message = (
        f"{len(connected)}/{len(sm100)} SM100 nodes are fully NVLink-connected"
        f"{_source_note(connected, 'nvlink_source', 'no agent NVLink label')}; {len(fits)} of them can hold the "
        f"{gpp}-GPU EP group in one node"
    )
    broken = [n.name for n in sm100 if n.nvlink_fully_connected is False]
    unknown = [n.name for n in sm100 if n.nvlink_fully_connected is None]
    if broken:
        message += f"; not fully connected: {_names(broken)}"
    if unknown:
        message += f"; NVLink unknown (no agent label, product not an NVSwitch/NVL part): {_names(unknown)}"
    return _check("NVLinkFullyConnected", "R14", bool(fits), message)


def _names(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _not_eligible_note(sm100: Sequence[NodeFacts], placement: Placement) -> str:
    eligible = set(placement.eligible)
    left_out = [n.name for n in sm100 if n.name not in eligible]
    return f"; SM100 nodes not eligible: {_names(left_out)}" if left_out else ""


def _check_capacity(placement: Placement, replicas: int, name: str = "Capacity") -> Check:
    return _check(
        name,
        "placement",
        placement.placeable,
        f"eligible nodes hold {placement.capacity} replica(s) of {placement.gpus_per_pod} GPUs; {replicas} wanted",
    )


# --- the decision ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Context:
    """What every branch of the decision shares."""

    spec: DeepSeekServingSpec
    facts: ModelFacts
    cands: Sequence[NodeFacts]
    ep: int
    gpp: int
    ppr: int
    min_mib: int

    def req(self, kind: Requirement, reason: str = "") -> NodeRequirement:
        """A node requirement that also carries the per-GPU memory the checkpoint needs."""
        return NodeRequirement(kind, reason=reason, min_gpu_memory_mib=self.min_mib)

    def place(self, requirement: NodeRequirement) -> Placement:
        return place(self.spec, self.cands, requirement, self.gpp, self.ppr)

    def resolution(
        self,
        backend: str,
        reason: str,
        message: str,
        runnable: bool,
        requirement: NodeRequirement,
        placement: Placement,
        checks: Sequence[Check],
        condition_reason: str | None = None,
    ) -> Resolution:
        return Resolution(
            requested=self.spec.moe_backend_as_written,
            moe_backend=backend,
            reason=reason,
            condition_reason=condition_reason or reason,
            message=message,
            backend_runnable=runnable,
            sequence_parallel=sequence_parallel(self.spec, backend),
            expert_parallel_size=self.ep,
            gpus_per_pod=self.gpp,
            pods_per_replica=self.ppr,
            replicas=self.spec.replicas,
            requirement=requirement,
            placement=placement,
            checks=tuple(checks),
            model=self.facts,
        )


def resolve(
    spec: DeepSeekServingSpec,
    inventory: NodeInventory,
    previous: PreviousDecision | None = None,
) -> Resolution:
    """Decide the MoE backend, sequence parallelism and placement for ``spec`` on ``inventory``."""
    requested = spec.moe_backend
    facts = model_facts(spec.model)
    gpp, ppr = gpus_per_pod(spec), pods_per_replica(spec)
    ctx = _Context(
        spec=spec,
        facts=facts,
        cands=candidates(spec, inventory),
        ep=expert_parallel_size(spec),
        gpp=gpp,
        ppr=ppr,
        min_mib=min_gpu_memory_mib(facts.vram_minimum_gb, gpp * ppr),
    )
    if requested == AUTO:
        res = _resolve_auto(ctx)
        if previous is not None and previous.moe_backend != res.moe_backend:
            res = _keep_previous(ctx, res, previous)
        return res
    if requested in MEGA_MOE_BACKENDS:
        return _resolve_explicit_mega(ctx, requested)
    return _resolve_explicit_other(ctx, requested)


def _resolve_auto(ctx: _Context) -> Resolution:
    spec, facts = ctx.spec, ctx.facts
    mega_req = ctx.req(Requirement.MEGA_MOE)
    mega_place = ctx.place(mega_req)
    sm100 = [n for n in ctx.cands if n.is_sm100]
    checks = [
        _check_architecture(facts),
        _check_gpu_architecture(ctx.cands, "R3"),
        _check_deep_gemm(spec),
        _check_expert_dtype(facts, "R5"),
        _check_routing(facts, "R6"),
        _check_dimensions(facts, spec, ctx.ep, "R7"),
        _check_expert_parallel(spec, ctx.ep, "R8", need_two=True),
        *_checks_layout(spec),
        _check_nvlink(sm100, mega_place, ctx.gpp),
        _check_memory(ctx),
        _check_capacity(mega_place, spec.replicas, "MegaMoECapacity"),
    ]
    failed = [c for c in checks if not c.passed]
    if not failed:
        message = (
            f"auto resolved to deep_gemm_mega_moe: all {len(checks)} checks passed; pods pinned "
            f"to the {len(mega_place.eligible)} SM100 fully NVLink-connected node(s)"
            + _not_eligible_note(sm100, mega_place)
        )
        return ctx.resolution(
            DEEP_GEMM_MEGA_MOE,
            REASON_MEGA_MOE_SELECTED,
            message,
            True,
            mega_req,
            mega_place,
            checks,
        )
    any_req = ctx.req(Requirement.ANY_GPU)
    first = failed[0]
    message = f"auto kept (vLLM chooses its FusedMoE backend): {first.name} failed: {first.message}"
    return ctx.resolution(
        AUTO,
        failed_reason(first.name),
        message,
        True,
        any_req,
        ctx.place(any_req),
        checks,
        condition_reason=REASON_KEPT_AUTO,
    )


def _keep_previous(ctx: _Context, fresh: Resolution, previous: PreviousDecision) -> Resolution:
    """Stability (design.md §3): node churn never restarts serving pods."""
    prev_backend = previous.moe_backend
    was_mega = prev_backend == DEEP_GEMM_MEGA_MOE
    req = ctx.req(Requirement.MEGA_MOE if was_mega else Requirement.ANY_GPU)
    prev_place = ctx.place(req)
    if not prev_place.eligible and not previous.serving:
        note = (
            f"the previous decision {prev_backend} has no eligible node left and no replica is "
            f"serving, so the decision changed to {fresh.moe_backend}"
        )
        return replace(fresh, message=fresh.message + "; " + note)
    if not prev_place.eligible:
        note = (
            f"node changes: no eligible node is left for the running {prev_backend} "
            f"({fresh.reason}: {fresh.message.split(': ', 2)[-1]}); it is kept because replicas "
            "are serving (node churn never restarts serving pods); new pods would stay Pending; "
            "a spec change re-decides"
        )
        reason = previous.reason or fresh.reason
    elif was_mega:
        note = (
            f"node changes: {fresh.reason} now ({fresh.message.split(': ', 1)[-1]}); the running "
            f"deep_gemm_mega_moe is kept because {len(prev_place.eligible)} eligible node(s) "
            "remain; a spec change re-decides"
        )
        reason = REASON_MEGA_MOE_SELECTED
    else:
        note = (
            f"node changes: deep_gemm_mega_moe has become possible on {len(fresh.eligible_nodes)} "
            "node(s) but is not applied to the running workload (it would restart it); a spec "
            "change re-decides"
        )
        reason = previous.reason or REASON_KEPT_AUTO
    return replace(
        fresh,
        moe_backend=prev_backend,
        reason=reason,
        condition_reason=REASON_MEGA_MOE_SELECTED if was_mega else REASON_KEPT_AUTO,
        message=f"{prev_backend} kept: {note}",
        requirement=req,
        placement=prev_place,
        sequence_parallel=sequence_parallel(ctx.spec, prev_backend),
    )


def _resolve_explicit_mega(ctx: _Context, backend: str) -> Resolution:
    spec, facts, cands = ctx.spec, ctx.facts, ctx.cands
    cutedsl = backend == FLASHINFER_MOE_EP_MEGA_CUTEDSL
    req = ctx.req(Requirement.CC_AT_LEAST_10 if cutedsl else Requirement.SM100)
    checks = [
        _check_expert_parallel(spec, ctx.ep, "A1", need_two=False),
        _check_routing(facts, "A2"),
        _check_expert_dtype(facts, "A3"),
    ]
    if cutedsl:
        ok = [n for n in cands if req.admits(n)]
        vllm = f". vLLM: moe_backend={backend} requires compute capability 10.0+ (the mega kernels are Blackwell-only)"
        checks.append(
            _check(
                "GPUArchitecture",
                "A9",
                bool(ok),
                f"{len(ok)}/{len(cands)} candidate nodes have compute capability >= 10.0"
                + ("" if ok else vllm),
            )
        )
    else:
        checks.append(_check_gpu_architecture(cands, "A4", VLLM_SM100_ONLY))
    checks.append(_check_dimensions(facts, spec, ctx.ep, "A5/A6"))
    if backend in FLASHINFER_MOE_EP_BACKENDS:
        arch = facts.architecture
        supported = arch in FLASHINFER_MOE_EP_ARCHITECTURES
        vllm = (
            f". vLLM: moe_backend={backend} is only supported for DeepSeek-V4 models "
            f"({sorted(FLASHINFER_MOE_EP_ARCHITECTURES)}), but the model is [{arch!r}]."
        )
        checks.append(
            _check(
                "FlashInferArchitecture",
                "A9",
                supported,
                f"architecture {arch}" + ("" if supported else vllm),
            )
        )
    checks.append(_check_cuda(spec, "A10"))
    checks.append(_check_memory(ctx))
    # A guard that no node can satisfy pins the pods to no node; a node guard pins to its nodes.
    spec_failed = [c for c in checks if not c.passed and c.name not in _NODE_CHECKS]
    node_req = ctx.req(Requirement.NONE, spec_failed[0].name) if spec_failed else req
    placement = ctx.place(node_req)
    sm100 = [n for n in cands if n.is_sm100]
    nvlink = _check_nvlink(sm100, ctx.place(ctx.req(Requirement.MEGA_MOE)), ctx.gpp)
    checks.append(
        nvlink.model_copy(
            update={
                "rule": "info",
                "message": nvlink.message + " (not enforced for an explicit backend)",
            }
        )
    )
    checks.append(_check_capacity(placement, spec.replicas))
    failed = [c for c in checks if not c.passed and c.rule not in ("info", "placement")]
    if failed:
        first = failed[0]
        message = (
            f"explicit {backend} cannot run: {first.name} failed: {first.message}; pods are "
            "pinned so they stay Pending instead of crashing after loading weights"
        )
        return ctx.resolution(
            backend, failed_reason(first.name), message, False, node_req, placement, checks
        )
    message = (
        f"explicit {backend} kept; vLLM's MegaMoE guards hold on {len(placement.eligible)} node(s)"
    )
    return ctx.resolution(backend, REASON_EXPLICIT, message, True, node_req, placement, checks)


# Checks whose failure depends on the nodes (the pods are pinned to where they hold).
_NODE_CHECKS = ("GPUArchitecture", "GPUMemory")


def min_gpu_memory_mib(vram_minimum_gb: int | None, gpus_per_replica: int) -> int:
    """Per-GPU memory (MiB) for ``vram_minimum_gb`` GB spread over a replica's GPUs; 0 = no check."""
    if not vram_minimum_gb:
        return 0
    return -(-vram_minimum_gb * 10**9 // (gpus_per_replica * 2**20))


def _check_memory(ctx: _Context) -> Check:
    if not ctx.min_mib:
        return _check(
            "GPUMemory",
            "fit",
            True,
            "no GPU memory minimum known for this checkpoint (spec.model.vramMinimumGB)",
        )
    need = ctx.req(Requirement.ANY_GPU)
    fits = [n for n in ctx.cands if need.admits(n)]
    unknown = [n.name for n in fits if n.gpu_memory_mib is None]
    message = (
        f"{len(fits)}/{len(ctx.cands)} candidate nodes have at least {ctx.min_mib} MiB per GPU "
        f"({ctx.facts.vram_minimum_gb} GB for the replica over {ctx.gpp * ctx.ppr} GPUs, "
        f"{ctx.facts.source('vram_minimum_gb')})"
    )
    if unknown:
        message += f"; memory unknown (no label), admitted: {_names(unknown)}"
    return _check("GPUMemory", "fit", bool(fits), message)


def _check_cuda(spec: DeepSeekServingSpec, rule: str) -> Check:
    rocm = spec.gpu_resource_name.startswith("amd.com/")
    return _check(
        "CUDAPlatform",
        rule,
        not rocm,
        f"GPU resource {spec.gpu_resource_name}"
        + (": ROCm, where DeepSeek V4.1 forces use_mega_moe=False" if rocm else " (CUDA)"),
    )


def _resolve_explicit_other(ctx: _Context, backend: str) -> Resolution:
    if ctx.facts.expert_dtype == "fp4":
        ok = backend in MXFP4_EXPLICIT_BACKENDS
        vllm = f"vLLM: moe_backend={backend!r} is not supported for MXFP4 MoE. Expected one of {sorted(MXFP4_EXPLICIT_BACKENDS)}."
        check = _check(
            "MXFP4Backend", "oracle", ok, f"{backend} is in the MXFP4 oracle's map" if ok else vllm
        )
    else:
        check = _check("ExplicitBackend", "R1", True, f"{backend} kept verbatim")
    if not check.passed:
        req = ctx.req(Requirement.NONE, check.name)
        placement = ctx.place(req)
        checks = [check, _check_capacity(placement, ctx.spec.replicas)]
        message = f"explicit {backend} cannot run: {check.message}"
        return ctx.resolution(
            backend, failed_reason(check.name), message, False, req, placement, checks
        )
    req = ctx.req(Requirement.ANY_GPU)
    placement = ctx.place(req)
    checks = [check, _check_capacity(placement, ctx.spec.replicas)]
    return ctx.resolution(
        backend, REASON_EXPLICIT, f"explicit {backend} kept verbatim", True, req, placement, checks
    )
