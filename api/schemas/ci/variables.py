"""Request and response schemas of ``/v1/variables``: configuration variables, shown in clear."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from leasehold.records.ci.variables import MAX_VARIABLE_BYTES, VariableInfo


class VariablePut(BaseModel):
    """``PUT /v1/variables/{name}`` (and the repository-scoped form)."""

    model_config = ConfigDict(extra="forbid")

    value: str = Field(description="the value, as ${{ vars.NAME }} yields it", max_length=MAX_VARIABLE_BYTES)


class VariableOut(BaseModel):
    object: Literal["ci.variable"] = "ci.variable"
    name: str
    value: str
    repo_id: str | None = None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_info(cls, info: VariableInfo) -> VariableOut:
        return cls(
            name=info.name,
            value=info.value,
            repo_id=info.repo_id,
            created_at=info.created_at,
            updated_at=info.updated_at,
        )


class VariableList(BaseModel):
    object: Literal["list"] = "list"
    data: list[VariableOut]
