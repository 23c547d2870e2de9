"""vLLM's ``--moe-backend`` names as the API admits them: any name of any supported release.

The per-release names and sets live in ``catalog/vllm`` (exported from each release); the engine
checks that the release a DeepSeekServing runs has the name it asks for. The admission (CEL)
rules here use what holds in every supported release. vLLM normalises the user's spelling with
``value.lower().replace("-", "_")``; so do we.
"""

from __future__ import annotations

from deepseek_operator.catalog.vllm import all_moe_backends, supported_releases, vllm_release
from deepseek_operator.catalog.vllm.rules import release_rules

AUTO = "auto"
DEEP_GEMM_MEGA_MOE = "deep_gemm_mega_moe"

# Every name of any supported release (the CRD accepts these; the engine checks the release).
MOE_BACKENDS: tuple[str, ...] = all_moe_backends()

# Every MegaMoE name of any release: each one needs expert parallelism in every release that has it.
MEGA_MOE_BACKENDS: frozenset[str] = frozenset().union(
    *(vllm_release(r).mega_moe_backends for r in supported_releases())
)


def _refuses_eplb_everywhere(backend: str) -> bool:
    having = [r for r in supported_releases() if backend in vllm_release(r).moe_backends]
    return bool(having) and all(backend in release_rules(r).flashinfer_eplb_refused for r in having)


# FlashInfer moe_ep names that refuse EPLB in every release that has them (an admission rule;
# the engine checks the others per release).
EPLB_REFUSED_BACKENDS: frozenset[str] = frozenset(
    b for b in MEGA_MOE_BACKENDS if _refuses_eplb_everywhere(b)
)


def normalize_backend(value: str) -> str:
    """Spell a backend the way vLLM's validator does: lower case, '-' becomes '_'."""
    return value.lower().replace("-", "_")


# Backends the MXFP4 oracle maps (``map_mxfp4_backend``, newest version, docs/decision-rules.md).
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
