"""The one base of every DeepSeekServing API model, spec, status and core/v1 parts alike.

One configuration for all of them, so the CRD's schema and the loader agree everywhere:
camelCase aliases (the manifest's spelling), no unknown fields, frozen values, and the attribute
docstrings as the field descriptions the CRD and docs/reference/api.md print.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """Base of every API model: camelCase aliases, no unknown fields, frozen, docstrings as descriptions."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
        frozen=True,
    )

    def manifest(self) -> dict[str, Any]:
        """The object as it goes into a manifest (a pod template): camelCase, unset fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True)
