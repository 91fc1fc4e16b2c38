"""Request and response schemas of ``/v1/variables``: configuration variables, shown in clear."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.objects import ObjectList, RecordView
from leasehold.records.ci.variables import MAX_VARIABLE_BYTES


class VariablePut(BaseModel):
    """``PUT /v1/variables/{name}`` (and the repository-scoped form)."""

    model_config = ConfigDict(extra="forbid")

    value: str = Field(description="the value, as ${{ vars.NAME }} yields it", max_length=MAX_VARIABLE_BYTES)


class VariableOut(RecordView):
    object: Literal["ci.variable"] = "ci.variable"
    name: str
    value: str
    repo_id: str | None = None
    # A deployment environment's variable: its environment (lower-case).
    environment: str | None = None
    created_at: datetime
    updated_at: datetime


class VariableList(ObjectList[VariableOut]):
    pass
