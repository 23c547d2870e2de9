"""GPU memory: how much each GPU product has, and what a vLLM release takes of it besides the
weights and the KV cache (MegaMoE's expert layout, its symmetric buffer, activations, a fixed
overhead, the server's memory defaults), the data the capacity model (engine/capacity.py) reads.

Sources: vLLM's own code (``engine/arg_utils.py``, ``models/deepseek_v4/nvidia/model.py``,
``model_executor/layers/fused_moe/deep_gemm_mega_moe.py``), the MegaMoE PR's measurement
(vllm#57220) and the products' data sheets. Each figure says where it came from; INFERRED marks
arithmetic on those sources rather than a figure read from them.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30
MIB = 2**20


@dataclass(frozen=True, kw_only=True)
class ReleaseMemory:
    """How one vLLM release's MegaMoE path lays out the expert weights."""

    # MegaMoE pads the routed experts' intermediate size up to a multiple of this (None: no pad).
    mega_moe_intermediate_multiple: int | None
    # MegaMoE keeps the original shared-expert weights beside its fused copy.
    mega_moe_retains_shared: bool
    source: str


# 0.33.0 (models/deepseek_v4/nvidia/model.py): DeepGemmMegaMoEExperts gets the checkpoint's
# moe_intermediate_size unpadded and owns the fused shared expert (the caller drops its MLP),
# replicated over TP under sequence parallelism: the two fixes of vllm#57204. INFERRED for the
# older releases: they behave as the MegaMoE PR measured (2304 -> 2560, shared copy retained).
_PR_ERA = ReleaseMemory(
    mega_moe_intermediate_multiple=512,
    mega_moe_retains_shared=True,
    source="INFERRED: as measured by vllm#57220 (before vllm#57204)",
)
RELEASE_MEMORY: dict[str, ReleaseMemory] = {
    "0.30.0": _PR_ERA,
    "0.31.0": _PR_ERA,
    "0.32.0": _PR_ERA,
    "0.33.0": ReleaseMemory(
        mega_moe_intermediate_multiple=None,
        mega_moe_retains_shared=False,
        source="vLLM 0.33.0 models/deepseek_v4/nvidia/model.py",
    ),
}

# MegaMoE's symmetric buffer per rank: DeepGEMM sizes it by batched tokens x top-k x hidden.
# Calibrated (INFERRED) on DeepGEMM's ~3.0 GiB for V4-Flash at 8K batched tokens:
# 3 GiB / (8192 x 6 x 4096) = 16 B; V4-Pro's ~5.1 GiB comes out at 5.25 GiB (3 % over).
SYMMETRIC_BUFFER_BYTES_PER_ELEMENT = 16

# Allowances for what vLLM's profiling run measures besides weights and the symmetric buffer
# (INFERRED, not measured here): activations peak at about 32 B per batched token and hidden
# unit; CUDA graphs, NCCL buffers and the CUDA context take a fixed 2 GiB per GPU.
ACTIVATION_BYTES_PER_TOKEN_HIDDEN = 32
FIXED_OVERHEAD_BYTES = 2 * GIB

# vLLM 0.33.0 engine/arg_utils.py: the OpenAI server's default --max-num-batched-tokens is
# 16384 on GPUs of at least 160 GiB, 8192 on those of at least 70 GiB (not A100), else 2048.
# The default --gpu-memory-utilization is 0.9.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


def default_max_num_batched_tokens(gpu_memory_bytes: int, product: str) -> int:
    """vLLM's OpenAI-server default ``--max-num-batched-tokens`` on this GPU."""
    if gpu_memory_bytes >= 160 * GIB:
        return 16384
    if gpu_memory_bytes >= 70 * GIB and "a100" not in product.lower():
        return 8192
    return 2048


# Memory per GPU (MiB, what NVML and GFD's nvidia.com/gpu.memory report) by exact GFD product:
# for nodes without a memory label. INFERRED from the products' data sheets.
PRODUCT_MEMORY_MIB: dict[str, int] = {
    "NVIDIA-GB200": 189471,
    "NVIDIA-B200": 183359,
    "NVIDIA-GB300": 284208,
    "NVIDIA-B300-SXM6-AC": 275040,
    "NVIDIA-H200": 143771,
    "NVIDIA-H100-80GB-HBM3": 81559,
    "NVIDIA-H20": 97871,
    "NVIDIA-H800": 81559,
}
