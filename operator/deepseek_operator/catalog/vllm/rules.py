"""Which of vLLM's MegaMoE guards each supported release has: the table the engine reads.

The names and sets come from the release's data file (exported from the release itself); the guard
behaviour below is read from each release's source and proven against the release's own code by
``make conformance`` (conformance/harness.py), which fails when a row here is wrong.

Two generations of the DeepSeek V4 model code:

* 0.30.0, 0.31.0: every MegaMoE backend (native and FlashInfer moe_ep) takes the model's MegaMoE
  path: expert parallel required, sqrtsoftplus routing, fp4 experts and expert divisibility by the
  EP group for all of them; ``validate_fi_moe_ep_config`` refuses EPLB for every FlashInfer moe_ep
  backend. 0.31.0 adds the ``norm_topk_prob`` guard. 0.30.0's FusedMoE path (every other
  backend) also asserts that the physical experts (routed + EPLB redundant) divide by TP.
* 0.32.0, 0.33.0: those model guards cover the native backend (``NATIVE_MEGA_MOE_BACKENDS``) only;
  the FlashInfer moe_ep kernels refuse a layer without expert parallelism (EP size > 1), dual
  batch overlap, weights other than fp4 (their formats: MXFP4, and NVFP4 for CuTeDSL), and (the
  DeepGEMM kernel only) EPLB. 0.33.0 adds the V4.1 prefill-context-parallel guard (PCP > 1 needs PP = DP = DCP = 1, no
  microbatching, speculative decoding, KV transfer or MegaMoE, and no prefix caching without SWA
  bounded replay) and V4.1's specialized decode (``decode_backend=latency_specialized`` in
  ``--additional-config``), which needs, among other things, no KV transfer.

Multi-node replicas (``--nnodes`` > 1, every release; the facts come from the data file):

* ``ParallelConfig`` refuses ``nnodes > 1`` unless the distributed executor backend is one of
  ``multi_node_executor_backends`` (``mp`` and ``uni``: never ``ray``).
* Every MegaMoE backend dispatches and combines the expert-parallel tokens inside its kernel over
  peer GPU memory: DeepGEMM's MegaMoE buffer is a torch symmetric-memory rendezvous over the EP
  group, and the FlashInfer moe_ep megakernels own their dispatch (vLLM binds them to the
  ``passthrough`` all2all). vLLM has no config-time check for it; across nodes it only works when
  every rank shares one multi-node NVLink domain (docs/decision-rules.md), so the operator confines a
  group to one NVLink clique (rule A11).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from deepseek_operator.catalog.vllm import VllmRelease, vllm_release


@dataclass(frozen=True)
class ReleaseRules:
    """The MegaMoE-relevant rules of one vLLM release."""

    data: VllmRelease
    model_guards_cover_flashinfer: bool  # the model's EP/routing/dtype/divisibility guards
    norm_topk_prob_guard: bool
    flashinfer_eplb_refused: frozenset[str]  # FlashInfer moe_ep backends that refuse EPLB
    flashinfer_refuses_dbo: bool
    flashinfer_needs_ep_group: bool  # the kernel needs an EP group of 2+ GPUs (use_ep)
    v41_prefill_context_parallel_guard: bool
    # V4.1's specialized decode (additional_config decode_backend=latency_specialized), which
    # refuses KV transfer among other things; older releases ignore the key.
    v41_specialized_decode: bool
    # _init_fused_moe_experts asserts the physical experts (routed + redundant) divide by TP
    fused_experts_divide_tp: bool

    @property
    def release(self) -> str:
        """The release these rules are of, e.g. ``"0.33.0"``."""
        return self.data.release

    def is_mega_moe(self, backend: str) -> bool:
        """The backend takes a MegaMoE path in this release."""
        return backend in self.data.mega_moe_backends

    def is_flashinfer_moe_ep(self, backend: str) -> bool:
        """The backend is one of this release's FlashInfer moe_ep megakernels."""
        return backend in self.data.flashinfer_moe_ep_backends

    def multi_node_executor_allowed(self, executor: str) -> bool:
        """vLLM accepts ``--nnodes`` > 1 with distributed executor backend ``executor``."""
        return executor in self.data.multi_node_executor_backends

    def needs_one_nvlink_domain(self, backend: str) -> bool:
        """A replica spanning nodes with ``backend`` needs every rank in one NVLink domain (A11)."""
        return self.is_mega_moe(backend) and self.data.mega_moe_symmetric_memory

    def model_guards_apply(self, backend: str) -> bool:
        """The model's MegaMoE guards (EP, routing, dtype, divisibility) run for ``backend``."""
        if backend in self.data.native_mega_moe_backends:
            return True
        return self.model_guards_cover_flashinfer and self.is_flashinfer_moe_ep(backend)


_LEGACY = {
    "model_guards_cover_flashinfer": True,
    "flashinfer_refuses_dbo": False,
    "flashinfer_needs_ep_group": False,
    "v41_prefill_context_parallel_guard": False,
    "v41_specialized_decode": False,
}
_MODERN = {
    "model_guards_cover_flashinfer": False,
    "flashinfer_refuses_dbo": True,
    "flashinfer_needs_ep_group": True,
}

_TABLE: dict[str, dict[str, object]] = {
    "0.30.0": {
        **_LEGACY,
        "norm_topk_prob_guard": False,
        "eplb": "all",
        "fused_experts_divide_tp": True,
    },
    "0.31.0": {
        **_LEGACY,
        "norm_topk_prob_guard": True,
        "eplb": "all",
        "fused_experts_divide_tp": False,
    },
    "0.32.0": {
        **_MODERN,
        "norm_topk_prob_guard": True,
        "v41_prefill_context_parallel_guard": False,
        "v41_specialized_decode": False,
        "eplb": "deep_gemm",
        "fused_experts_divide_tp": False,
    },
    "0.33.0": {
        **_MODERN,
        "norm_topk_prob_guard": True,
        "v41_prefill_context_parallel_guard": True,
        "v41_specialized_decode": True,
        "eplb": "deep_gemm",
        "fused_experts_divide_tp": False,
    },
}

FLASHINFER_MOE_EP_DEEP_GEMM = "flashinfer_moe_ep_mega_deep_gemm"


def _flashinfer_subset(data: VllmRelease, which: object) -> frozenset[str]:
    if which == "all":
        return data.flashinfer_moe_ep_backends
    if which == "deep_gemm":
        return data.flashinfer_moe_ep_backends & {FLASHINFER_MOE_EP_DEEP_GEMM}
    return frozenset()


@functools.cache
def release_rules(release: str) -> ReleaseRules:
    """The rules of one supported release (KeyError for an unsupported one)."""
    data = vllm_release(release)
    row = _TABLE[release]
    return ReleaseRules(
        data=data,
        model_guards_cover_flashinfer=bool(row["model_guards_cover_flashinfer"]),
        norm_topk_prob_guard=bool(row["norm_topk_prob_guard"]),
        flashinfer_eplb_refused=_flashinfer_subset(data, row["eplb"]),
        flashinfer_refuses_dbo=bool(row["flashinfer_refuses_dbo"]),
        flashinfer_needs_ep_group=bool(row["flashinfer_needs_ep_group"]),
        v41_prefill_context_parallel_guard=bool(row["v41_prefill_context_parallel_guard"]),
        v41_specialized_decode=bool(row["v41_specialized_decode"]),
        fused_experts_divide_tp=bool(row["fused_experts_divide_tp"]),
    )
