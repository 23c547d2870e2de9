"""The decision chains as tables: per backend, the ordered checks, their vLLM rule and release.

Each :class:`Step` is one row: the rule id of docs/decision-rules.md it mirrors (R… for auto's
MegaMoE selection, A… for an explicit MegaMoE backend's hard guards, E… for EPLB and the FusedMoE
path; "" for the operator's own checks: the release, memory, capacity), the check it runs, the
backends it applies to (``when``) and the vLLM releases it applies to (``release``, a predicate on
the release's :class:`ReleaseRules`, so a new release changes data, not this table). :func:`run_chain` evaluates every row that applies, in order,
never short-circuiting, so the status shows every check.

* :data:`RELEASE_CHAIN`: what holds or fails whatever the nodes, for every backend.
* :data:`AUTO_CHAIN`: ``auto`` becomes ``deep_gemm_mega_moe`` only when all of these pass.
* :data:`MEGA_MOE_CHAIN`: vLLM's guards on an explicit MegaMoE (or FlashInfer moe_ep) backend.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from deepseek_operator.catalog.vllm.rules import ReleaseRules
from deepseek_operator.engine import (
    expert_checks,
    flashinfer_checks,
    kv_transfer_checks,
    model_checks,
    node_checks,
    spec_checks,
)
from deepseek_operator.engine.checks import VLLM_SM100_ONLY, CheckResult
from deepseek_operator.engine.placement import Requirement
from deepseek_operator.engine.release import (
    backend_name,
    extra_args_in_release,
    multi_node_executor,
    prefill_context_parallel,
)
from deepseek_operator.engine.resolution import DecisionInputs


@dataclass(frozen=True)
class ChainContext:
    """What a row reads: the decision's inputs, the backend asked for and its release's rules."""

    inputs: DecisionInputs
    backend: str
    rules: ReleaseRules

    @property
    def expert_group(self) -> int:
        """vLLM's MoE EP group: DP x PCP x TP with expert parallelism, DP x TP without PCP."""
        p = self.inputs.spec.parallelism
        pcp = p.prefill_context_parallel_size if p.expert_parallel else 1
        return self.inputs.layout.expert_parallel_size * pcp

    @property
    def flashinfer(self) -> bool:
        """Whether the backend is one of FlashInfer's moe_ep kernels."""
        return self.rules.is_flashinfer_moe_ep(self.backend)

    @property
    def model_guards(self) -> bool:
        """Whether vLLM's DeepSeek V4 MegaMoE model guards (A1, A2, A5/A6) run for the backend."""
        return self.rules.model_guards_apply(self.backend)

    @property
    def one_nvlink_domain(self) -> bool:
        """Whether a multi-pod replica's EP group needs NVLink between every rank (A11)."""
        multi_pod = self.inputs.layout.pods_per_replica > 1
        return multi_pod and self.rules.needs_one_nvlink_domain(self.backend)


Outcome = CheckResult | Sequence[CheckResult] | None


def _every_backend(_: ChainContext) -> bool:
    return True


def _every_release(_: ReleaseRules) -> bool:
    return True


@dataclass(frozen=True)
class Step:
    """One row of a chain: a check, its vLLM rule, which backends and releases it applies to."""

    rule: str
    check: Callable[[ChainContext, str], Outcome]
    when: Callable[[ChainContext], bool] = _every_backend
    release: Callable[[ReleaseRules], bool] = _every_release


def run_chain(chain: Sequence[Step], ctx: ChainContext) -> list[CheckResult]:
    """The results of every row of ``chain`` that applies to ``ctx``, in order."""
    out: list[CheckResult] = []
    for step in chain:
        if not (step.release(ctx.rules) and step.when(ctx)):
            continue
        result = step.check(ctx, step.rule)
        if isinstance(result, CheckResult):
            out.append(result)
        elif result is not None:
            out.extend(result)
    return out


# Checks over the candidate nodes, shared by every spec with the same candidates.


def gpu_architecture(inputs: DecisionInputs, rule: str, vllm_msg: str = "") -> CheckResult:
    """The GPU architecture check (SM100) over the candidates."""
    # inputs.excluded is a function of the candidates' key, so the shared result stays right.
    return inputs.over_candidates(
        ("gpu_architecture", rule, vllm_msg),
        lambda: node_checks.gpu_architecture(
            inputs.candidates, rule, vllm_msg, excluded=inputs.excluded
        ),
    )


def memory_check(inputs: DecisionInputs) -> CheckResult:
    """GPUMemory over the candidates: memory alone (a node outside every NVLink clique is left
    out by the clique check, not here)."""
    requirement = dataclasses.replace(inputs.requirement(Requirement.ANY_GPU), clique_key=None)
    facts, gpus_per_replica = inputs.facts, inputs.layout.gpus_per_replica
    # What gpu_memory reads of the facts: the minimum and where it came from.
    key = (
        "gpu_memory",
        requirement,
        facts.vram_minimum_gb,
        facts.source("vram_minimum_gb"),
        gpus_per_replica,
    )
    return inputs.over_candidates(
        key,
        lambda: node_checks.gpu_memory(inputs.candidates, requirement, facts, gpus_per_replica),
    )


def nvlink_fully_connected(inputs: DecisionInputs) -> CheckResult:
    """R14 over the SM100 candidates and the MegaMoE placement, NVLink alone: a node kept out
    by its memory label is the GPUMemory check's to report, so an unreadable memory label never
    reads as an NVLink failure."""
    requirement = dataclasses.replace(
        inputs.requirement(Requirement.MEGA_MOE), min_gpu_memory_mib=0
    )
    gpus_per_pod = inputs.layout.gpus_per_pod
    return inputs.over_candidates(
        ("nvlink_fully_connected", requirement, gpus_per_pod),
        lambda: node_checks.nvlink_fully_connected(
            inputs.sm100_candidates, inputs.place(requirement), gpus_per_pod
        ),
    )


def fused_moe_checks(inputs: DecisionInputs, rules: ReleaseRules) -> list[CheckResult]:
    """The FusedMoE path's expert checks (every backend that is not a MegaMoE path, and auto)."""
    fused = expert_checks.fused_experts(rules, inputs.facts, inputs.spec)
    return [fused] if fused is not None else []


def _flashinfer_capability(ctx: ChainContext) -> CheckResult:
    inputs, rules, backend = ctx.inputs, ctx.rules, ctx.backend
    capabilities = rules.data.flashinfer_moe_ep_capabilities
    return inputs.over_candidates(
        ("flashinfer_capability", capabilities, backend),
        lambda: node_checks.flashinfer_capability(inputs.candidates, capabilities, backend),
    )


def _guards_norm_topk_prob(rules: ReleaseRules) -> bool:
    """Releases whose DeepSeek V4 model refuses norm_topk_prob=False."""
    return rules.norm_topk_prob_guard


def _refuses_dbo(rules: ReleaseRules) -> bool:
    """Releases whose FlashInfer moe_ep kernels refuse dual-batch overlap."""
    return rules.flashinfer_refuses_dbo


def _needs_ep_group(rules: ReleaseRules) -> bool:
    """Releases whose FlashInfer moe_ep kernels need an EP group of 2+ GPUs."""
    return rules.flashinfer_needs_ep_group


RELEASE_CHAIN: tuple[Step, ...] = (
    # KnownMoEBackend: the release's MoEBackend names
    Step("", lambda c, _: backend_name(c.rules, c.backend)),
    # the release's prefill context parallel guard
    Step(
        "",
        lambda c, _: prefill_context_parallel(
            c.rules, c.inputs.facts, c.inputs.spec, c.backend, c.inputs.kv_role is not None
        ),
    ),
    # the release's multi-node executor
    Step(
        "",
        lambda c, _: multi_node_executor(c.rules, c.inputs.spec, c.inputs.layout.pods_per_replica),
    ),
    # ExtraArgsInRelease: every extraArgs option is this release's
    Step("", lambda c, _: extra_args_in_release(c.rules, c.inputs.spec)),
    Step("E1", lambda c, _: expert_checks.eplb_settings(c.inputs.spec)),
    # a disaggregated role: what vLLM refuses only because KV transfer is on
    Step("", lambda c, _: kv_transfer_checks.context_parallel(c.inputs.spec, c.inputs.kv_role)),
    Step(
        "",
        lambda c, _: kv_transfer_checks.decode_context_parallel(c.inputs.spec, c.inputs.kv_role),
    ),
    Step("", lambda c, _: kv_transfer_checks.allocator(c.inputs.spec, c.inputs.kv_role)),
    Step(
        "",
        lambda c, _: kv_transfer_checks.specialized_decode(
            c.rules, c.inputs.facts, c.inputs.spec, c.inputs.kv_role
        ),
    ),
)
"""After the VLLMRelease check: the release's backend names and its release-wide guards."""

AUTO_CHAIN: tuple[Step, ...] = (
    Step("R2", lambda c, _: model_checks.model_architecture(c.inputs.facts)),
    Step("R3", lambda c, rule: gpu_architecture(c.inputs, rule)),
    Step("R4", lambda c, _: spec_checks.deep_gemm(c.inputs.spec)),
    Step("R5", lambda c, rule: model_checks.expert_dtype(c.inputs.facts, rule)),
    Step("R6", lambda c, rule: model_checks.routing(c.inputs.facts, rule)),
    Step(
        "R7",
        lambda c, rule: expert_checks.dimensions(
            c.inputs.facts, c.inputs.spec, c.inputs.layout.expert_parallel_size, rule
        ),
    ),
    Step(
        "R8",
        lambda c, rule: expert_checks.expert_parallel(
            c.inputs.spec, c.inputs.layout.expert_parallel_size, rule, need_two=True
        ),
    ),
    Step("R9-R13", lambda c, _: spec_checks.layout_rules(c.inputs.spec)),
    Step("R14", lambda c, _: nvlink_fully_connected(c.inputs)),
    Step(
        "R6",
        lambda c, rule: model_checks.normalized_top_k(c.inputs.facts, rule),
        release=_guards_norm_topk_prob,
    ),
    Step("", lambda c, _: memory_check(c.inputs)),
    Step(
        "",
        lambda c, _: node_checks.capacity(
            c.inputs.place(c.inputs.requirement(Requirement.MEGA_MOE)),
            c.inputs.spec.replicas,
            "MegaMoECapacity",
        ),
    ),
)
"""auto → deep_gemm_mega_moe: vLLM PR #57220's conditions, scoped to DeepSeek V4.1, and room."""

MEGA_MOE_CHAIN: tuple[Step, ...] = (
    Step(
        "A1",
        lambda c, rule: expert_checks.expert_parallel(
            c.inputs.spec, c.inputs.layout.expert_parallel_size, rule, need_two=False
        ),
        when=lambda c: c.model_guards,
    ),
    Step(
        "A2",
        lambda c, rule: model_checks.routing(c.inputs.facts, rule),
        when=lambda c: c.model_guards,
    ),
    Step(
        "A2",
        lambda c, rule: model_checks.normalized_top_k(c.inputs.facts, rule),
        when=lambda c: c.model_guards,
        release=_guards_norm_topk_prob,
    ),
    Step(
        "A1",
        lambda c, _: flashinfer_checks.flashinfer_expert_parallel(c.inputs.spec, c.expert_group),
        when=lambda c: not c.model_guards and c.flashinfer,
        release=_needs_ep_group,
    ),
    Step("A3", lambda c, rule: model_checks.expert_dtype(c.inputs.facts, rule)),
    Step("A9", lambda c, _: _flashinfer_capability(c), when=lambda c: c.flashinfer),
    Step(
        "A4",
        lambda c, rule: gpu_architecture(c.inputs, rule, VLLM_SM100_ONLY),
        when=lambda c: not c.flashinfer,
    ),
    Step(
        "A5/A6",
        lambda c, rule: expert_checks.dimensions(
            c.inputs.facts, c.inputs.spec, c.expert_group, rule, multiples_of_128=not c.flashinfer
        ),
        when=lambda c: c.model_guards,
    ),
    # A FlashInfer moe_ep kernel without the model guards runs on the FusedMoE path.
    Step(
        "E2",
        lambda c, _: fused_moe_checks(c.inputs, c.rules),
        when=lambda c: not c.model_guards,
    ),
    Step(
        "A9",
        lambda c, _: flashinfer_checks.flashinfer_architecture(c.rules, c.inputs.facts, c.backend),
        when=lambda c: c.backend in c.rules.data.flashinfer_moe_ep_architecture_checked,
    ),
    Step(
        "A9",
        lambda c, _: flashinfer_checks.flashinfer_eplb(c.rules, c.inputs.spec, c.backend),
        when=lambda c: c.backend in c.rules.flashinfer_eplb_refused,
    ),
    Step(
        "A9",
        lambda c, _: flashinfer_checks.flashinfer_microbatching(c.rules, c.inputs.spec, c.backend),
        when=lambda c: c.flashinfer,
        release=_refuses_dbo,
    ),
    Step("A10", lambda c, rule: spec_checks.cuda_platform(c.inputs.spec, rule)),
    Step("", lambda c, _: memory_check(c.inputs)),
    # Across nodes the EP group's in-kernel all-to-all needs NVLink between every rank.
    Step(
        "A11",
        lambda c, rule: node_checks.nvlink_clique(
            c.inputs.place(c.inputs.requirement(Requirement.SM100)), c.inputs.clique_key, rule
        ),
        when=lambda c: c.one_nvlink_domain,
    ),
)
"""An explicit MegaMoE backend: vLLM's hard guards, each pinning the pods where it holds."""
