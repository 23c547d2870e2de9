"""vLLM's ``--moe-backend`` values and the MegaMoE sets, as in ``vllm/config/kernel.py``.

Source: vllm-rules.md §1.1–1.2 (docs.vllm.ai ``api/vllm/config/kernel/``, lastmod 2026-09-24).
vLLM normalises the user's spelling with ``value.lower().replace("-", "_")``; so do we.
"""

from __future__ import annotations

AUTO = "auto"
DEEP_GEMM_MEGA_MOE = "deep_gemm_mega_moe"
FLASHINFER_MOE_EP_MEGA_DEEP_GEMM = "flashinfer_moe_ep_mega_deep_gemm"
FLASHINFER_MOE_EP_MEGA_CUTEDSL = "flashinfer_moe_ep_mega_cutedsl"

# The MoEBackend Literal, newest version found (vllm-rules.md §1.1), in vLLM's order.
MOE_BACKENDS: tuple[str, ...] = (
    AUTO,
    "triton",
    "batched_triton",
    "deep_gemm",
    DEEP_GEMM_MEGA_MOE,
    "cutlass",
    "flashinfer_trtllm",
    "flashinfer_cutlass",
    "flashinfer_cutedsl",
    "flashinfer_b12x",
    "b12x",
    FLASHINFER_MOE_EP_MEGA_DEEP_GEMM,
    FLASHINFER_MOE_EP_MEGA_CUTEDSL,
    "marlin",
    "humming",
    "triton_unfused",
    "aiter",
    "aiter_triton_mxfp4_bf16",
    "flydsl",
    "rdna3",
    "hpc",
    "emulation",
)

FLASHINFER_MOE_EP_BACKENDS: frozenset[str] = frozenset(
    {FLASHINFER_MOE_EP_MEGA_DEEP_GEMM, FLASHINFER_MOE_EP_MEGA_CUTEDSL}
)
MEGA_MOE_BACKENDS: frozenset[str] = frozenset({DEEP_GEMM_MEGA_MOE}) | FLASHINFER_MOE_EP_BACKENDS
# vLLM's FLASHINFER_MOE_EP_ARCHITECTURES: the FlashInfer moe_ep backends are DeepSeek-V4 only.
FLASHINFER_MOE_EP_ARCHITECTURES: frozenset[str] = frozenset(
    {"DeepseekV4ForCausalLM", "DeepSeekV4MTPModel"}
)


def normalize_backend(value: str) -> str:
    """Spell a backend the way vLLM's validator does: lower case, '-' becomes '_'."""
    return value.lower().replace("-", "_")


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
