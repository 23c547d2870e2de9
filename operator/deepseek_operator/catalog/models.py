"""Known DeepSeek checkpoints and the facts that decide the MoE backend.

Sources (docs/decision-rules.md, "Model geometry" and the checkpoint rules): the HF configs echoed in the recipes and in
vLLM test fixtures. A user's ``spec.model`` fields override these; for names not listed here the
user must supply them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CheckpointFacts:
    """Backend-deciding facts of one checkpoint."""

    name: str
    architecture: str
    expert_dtype: str
    scoring_func: str
    hidden_size: int
    moe_intermediate_size: int
    num_routed_experts: int
    num_draft_routed_experts: int | None
    min_vllm: str
    vram_minimum_gb: int | None = None  # the vLLM recipe's vram_minimum_gb (total per replica)
    norm_topk_prob: bool = True  # HF config: the router renormalises its top-k probabilities
    # What the checkpoint's files take on disk, in GiB (a fill's cache volume must hold it);
    # None where the project has no measured figure.
    checkpoint_gib: float | None = None


V4_ARCH = "DeepseekV4ForCausalLM"
V41_ARCH = "DeepseekV41ForCausalLM"

CHECKPOINTS: tuple[CheckpointFacts, ...] = (
    # docs/decision-rules.md: 284B/13B active, 256 routed experts top-6, hidden 4096, MoE inter 2048,
    # MXFP4 experts; recipe DeepSeek-V4-Flash.yaml (min vLLM 0.20.0). The MTP draft reuses the
    # target's 256-expert MoE geometry (INFERRED: DeepSeekV4MTPModel shares the text config).
    CheckpointFacts(
        name="deepseek-ai/DeepSeek-V4-Flash",
        architecture=V4_ARCH,
        expert_dtype="fp4",
        scoring_func="sqrtsoftplus",
        hidden_size=4096,
        moe_intermediate_size=2048,
        num_routed_experts=256,
        num_draft_routed_experts=256,
        min_vllm="0.20.0",
        vram_minimum_gb=170,  # recipe DeepSeek-V4-Flash.yaml `vram_minimum_gb: 170`
    ),
    # docs/decision-rules.md A3: V4-Flash-Base stores expert_dtype="fp8", so MegaMoE rejects it.
    CheckpointFacts(
        name="deepseek-ai/DeepSeek-V4-Flash-Base",
        architecture=V4_ARCH,
        expert_dtype="fp8",
        scoring_func="sqrtsoftplus",
        hidden_size=4096,
        moe_intermediate_size=2048,
        num_routed_experts=256,
        num_draft_routed_experts=256,
        min_vllm="0.20.0",
    ),
    # docs/decision-rules.md: V4-Pro 384 experts top-6, hidden 7168, intermediate 3072 (DeepGEMM PR #316
    # benchmarks); FP4 experts like V4-Flash.
    CheckpointFacts(
        name="deepseek-ai/DeepSeek-V4-Pro",
        architecture=V4_ARCH,
        expert_dtype="fp4",
        scoring_func="sqrtsoftplus",
        hidden_size=7168,
        moe_intermediate_size=3072,
        num_routed_experts=384,
        num_draft_routed_experts=384,
        min_vllm="0.20.0",
    ),
    # V4-Pro-Base: V4-Pro's geometry, stored "FP8 throughout" (the Hugging Face DeepSeek V4
    # release post, huggingface/blog#3363), so like V4-Flash-Base its experts are FP8.
    CheckpointFacts(
        name="deepseek-ai/DeepSeek-V4-Pro-Base",
        architecture=V4_ARCH,
        expert_dtype="fp8",
        scoring_func="sqrtsoftplus",
        hidden_size=7168,
        moe_intermediate_size=3072,
        num_routed_experts=384,
        num_draft_routed_experts=384,
        min_vllm="0.20.0",
    ),
    # docs/decision-rules.md: V4.1-Flash 769B/15.5B active, hidden 5120, moe_intermediate_size 2304,
    # 384 routed experts top-6; DSpark drafter 128 experts top-3; quantization_config
    # expert_dtype fp4; recipe DeepSeek-V4.1-Flash.yaml (min vLLM 0.30.0).
    CheckpointFacts(
        name="deepseek-ai/DeepSeek-V4.1-Flash",
        architecture=V41_ARCH,
        expert_dtype="fp4",
        scoring_func="sqrtsoftplus",
        hidden_size=5120,
        moe_intermediate_size=2304,
        num_routed_experts=384,
        num_draft_routed_experts=128,
        min_vllm="0.30.0",
        # recipe DeepSeek-V4.1-Flash.yaml `vram_minimum_gb: 614` (checkpoint x 1.2): "fits one
        # GB200 NVL4 tray (768 GB) at TP4, or one 8-GPU H200 node".
        vram_minimum_gb=614,
        # docs/decision-rules.md: about 476 GiB (259.5 of experts, 188.8 of engram tables, 21.9
        # of scales, the rest dense).
        checkpoint_gib=476.0,
    ),
)

_BY_KEY = {c.name.lower(): c for c in CHECKPOINTS} | {
    c.name.split("/")[-1].lower(): c for c in CHECKPOINTS
}


def find_checkpoint(name: str) -> CheckpointFacts | None:
    """The catalog entry for a HF id or its basename (case-insensitive), or None."""
    key = name.strip().rstrip("/").lower()
    return _BY_KEY.get(key) or _BY_KEY.get(key.split("/")[-1])
