"""Model facts for the decision: the user's ``spec.model`` fields over the catalog entry."""

from __future__ import annotations

from dataclasses import dataclass, field

from deepseek_operator.api.spec import ModelSpec
from deepseek_operator.catalog.models import find_checkpoint

_FACT_FIELDS = (
    "architecture",
    "expert_dtype",
    "scoring_func",
    "norm_topk_prob",
    "hidden_size",
    "moe_intermediate_size",
    "num_routed_experts",
    "num_draft_routed_experts",
    "vram_minimum_gb",
)


@dataclass(frozen=True)
class ModelFacts:
    """Backend-deciding facts of the checkpoint, each remembering where it came from."""

    name: str
    architecture: str | None = None
    expert_dtype: str | None = None
    scoring_func: str | None = None
    norm_topk_prob: bool | None = None
    hidden_size: int | None = None
    moe_intermediate_size: int | None = None
    num_routed_experts: int | None = None
    num_draft_routed_experts: int | None = None
    vram_minimum_gb: int | None = None
    sources: dict[str, str] = field(default_factory=dict)

    def source(self, fact: str) -> str:
        """'spec.model' or 'catalog: <name>' for ``fact``; 'unknown' if it is not known."""
        return self.sources.get(fact, "unknown")


def model_facts(model: ModelSpec) -> ModelFacts:
    """Merge ``spec.model`` (wins) with the catalog entry for its name (if any)."""
    entry = find_checkpoint(model.name)
    values: dict[str, object] = {}
    sources: dict[str, str] = {}
    for fact in _FACT_FIELDS:
        user = getattr(model, fact)
        if user is not None:
            values[fact], sources[fact] = user, "spec.model"
        elif entry is not None:
            values[fact], sources[fact] = getattr(entry, fact), f"catalog: {entry.name}"
    return ModelFacts(
        name=model.name,
        sources=sources,
        **values,  # type: ignore[arg-type]
    )
