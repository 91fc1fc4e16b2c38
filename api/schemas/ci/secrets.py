"""Request and response schemas of ``/v1/secrets``: values go in, only names and times come out."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, SecretStr

from api.schemas.objects import ObjectList, RecordView
from leasehold.records.ci.secrets import MAX_SECRET_BYTES


class SecretPut(BaseModel):
    """``PUT /v1/secrets/{name}`` (and the repository-scoped form)."""

    value: SecretStr = Field(description="the secret value; never returned", max_length=MAX_SECRET_BYTES)


class SecretOut(RecordView):
    """A secret as listed: its name, scope and times, never its value."""

    object: Literal["ci.secret"] = "ci.secret"
    name: str
    repo_id: str | None = None
    created_at: datetime
    updated_at: datetime


class SecretList(ObjectList[SecretOut]):
    pass
