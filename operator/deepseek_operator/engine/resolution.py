"""The outcome of a decision (:class:`Resolution`) and what every branch of it shares."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.engine.capacity_report import CapacityReport
from deepseek_operator.engine.checks import CheckResult, failed
from deepseek_operator.engine.cluster_apis import ComputeDomainMode
from deepseek_operator.engine.layout import Layout, sequence_parallel
from deepseek_operator.engine.model_facts import ModelFacts
from deepseek_operator.engine.placement import NodeRequirement, Placement, Requirement, place
from deepseek_operator.engine.release import ReleaseChoice
from deepseek_operator.nodes.claims import ClaimOwner
from deepseek_operator.nodes.facts import NodeFacts

_T = TypeVar("_T")
Shared = Callable[[Hashable, Callable[[], Any]], Any]
"""``shared(key, compute)``: ``compute()``, or the value an earlier call with ``key`` returned."""


def unshared(_key: Hashable, compute: Callable[[], Any]) -> Any:
    """No sharing: always ``compute()``."""
    return compute()


@dataclass(frozen=True)
class KVTransfer:
    """How one role of a disaggregated serving transfers KV blocks (what the renderer needs)."""

    kv_role: str  # kv_producer (prefill) or kv_consumer (decode)
    connector: str  # kv_transfer_config.kv_connector
    role: str  # prefill or decode
    # THIS role's eligible nodes include an NVLink clique: its pods prefer the clique where the
    # other role's pods run (transfers may then use UCX cuda_ipc over multi-node NVLink, RDMA
    # otherwise). Only the role's own nodes decide it, never the other role's: an edit of one
    # role must not rewrite the other's pod template (docs/disaggregation.md, rollouts).
    own_clique: bool = False


@dataclass(frozen=True)
class Resolution:
    """Everything the renderer and the status need from the decision."""

    requested: str  # spec.moeBackend as the user wrote it
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
    checks: tuple[CheckResult, ...]
    model: ModelFacts
    # Multi-node NVLink: the label that names each group's clique (None: groups not confined)
    # and whether each pod gets an IMEX channel from a ComputeDomain.
    clique_key: str | None = None
    compute_domain: ComputeDomainMode = ComputeDomainMode.NOT_NEEDED
    leader_worker_set: bool = True  # the cluster serves LeaderWorkerSet (multi-pod replicas)
    vllm_version: str = ""  # the release whose rules decided
    capacity: CapacityReport | None = None  # the KV-cache capacity of the decided path
    # Pods claim their GPUs through DRA (a ResourceClaimTemplate of the gpu.nvidia.com
    # DeviceClass) instead of a gpuResourceName limit: spec.gpuAllocation, or decided by the pool.
    gpu_claims: bool = False
    kv_transfer: KVTransfer | None = None  # a role of a disaggregated serving (None: aggregated)

    @property
    def eligible_nodes(self) -> tuple[str, ...]:
        """Names of the nodes where the decision holds and a pod fits."""
        return self.placement.eligible

    @property
    def failed_checks(self) -> list[CheckResult]:
        """The checks that did not pass, in order."""
        return failed(self.checks)


@dataclass(frozen=True)
class DecisionInputs:
    """What every branch of the decision reads: the spec, its facts, layout and candidate nodes."""

    spec: DeepSeekServingSpec
    facts: ModelFacts
    candidates: Sequence[NodeFacts]
    layout: Layout
    release: ReleaseChoice
    clique_key: str | None = None  # multi-node groups stay in one clique named by this label
    # Results over the candidate nodes, shared by every decision over the same candidates
    # (see :func:`~deepseek_operator.engine.decision.resolve`): the key names every input
    # besides the candidates themselves.
    shared: Shared = field(default=unshared, compare=False, repr=False)

    def over_candidates(self, key: Hashable, compute: Callable[[], _T]) -> _T:
        """``compute()`` (a pure function of the candidates and of what ``key`` holds), shared."""
        return cast(_T, self.shared(key, compute))

    # GPU-labelled nodes that are no candidates, and why (named in the placement message).
    excluded: tuple[tuple[str, str], ...] = ()
    # A role of a disaggregated serving: the kv_role it renders (None: aggregated, no transfer).
    kv_role: str | None = None
    # The serving whose pods' claims hold DRA devices on the candidates (None: it holds none),
    # part of the shared results' key: those devices are free for it alone.
    claim_owner: ClaimOwner | None = None
    # Results of this one decision that several of its steps read (the release checks: once to
    # refuse early, again as the head of every backend chain).
    _within: dict[Hashable, Any] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def once(self, key: Hashable, compute: Callable[[], _T]) -> _T:
        """``compute()``, evaluated once per decision for ``key``."""
        if key not in self._within:
            self._within[key] = compute()
        return cast(_T, self._within[key])

    @property
    def sm100_candidates(self) -> tuple[NodeFacts, ...]:
        """The candidate nodes whose GPUs are SM100."""
        return self.over_candidates(
            ("sm100",), lambda: tuple(n for n in self.candidates if n.is_sm100)
        )

    def requirement(self, kind: Requirement, reason: str = "") -> NodeRequirement:
        """A node requirement that also carries the per-GPU memory the checkpoint needs."""
        return NodeRequirement(
            kind,
            reason=reason,
            min_gpu_memory_mib=self.layout.min_gpu_memory_mib,
            clique_key=self.clique_key,
        )

    def place(self, requirement: NodeRequirement) -> Placement:
        """Eligible nodes and capacity for ``requirement`` among the candidates."""
        gpus_per_pod, pods_per_replica = self.layout.gpus_per_pod, self.layout.pods_per_replica
        # place() reads the spec's GPU resource name (part of the candidates' key) and replicas;
        # the excluded nodes are a function of the candidates' key too.
        return self.over_candidates(
            ("place", requirement, gpus_per_pod, pods_per_replica, self.spec.replicas),
            lambda: place(
                self.spec,
                self.candidates,
                requirement,
                gpus_per_pod,
                pods_per_replica,
                self.excluded,
                self.claim_owner,
            ),
        )

    def resolution(
        self,
        backend: str,
        reason: str,
        message: str,
        *,
        runnable: bool,
        requirement: NodeRequirement,
        placement: Placement,
        checks: Sequence[CheckResult],
        condition_reason: str | None = None,
    ) -> Resolution:
        """A :class:`Resolution` of these inputs for ``backend``."""
        return Resolution(
            requested=self.spec.moe_backend_as_written,
            moe_backend=backend,
            reason=reason,
            condition_reason=condition_reason or reason,
            message=message,
            backend_runnable=runnable,
            sequence_parallel=sequence_parallel(self.spec, backend),
            expert_parallel_size=self.layout.expert_parallel_size,
            gpus_per_pod=self.layout.gpus_per_pod,
            pods_per_replica=self.layout.pods_per_replica,
            replicas=self.spec.replicas,
            requirement=requirement,
            placement=placement,
            checks=tuple(checks),
            model=self.facts,
            clique_key=self.clique_key,
            vllm_version=self.release.version,
        )
