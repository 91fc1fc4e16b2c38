"""Request and response schemas of the CI API: repositories, pushes, runs, jobs, logs."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, SecretStr

from leasehold.repos import RepoRecord

# Repositories ------------------------------------------------------------------------------


class RepoCreate(BaseModel):
    """``POST /v1/repos``."""

    name: str = Field(description="full name as the git host spells it, e.g. 'acme/widgets'", max_length=200)
    clone_url: str = Field(description="absolute local path, file:// URL or https:// URL", max_length=2000)
    webhook_secret: SecretStr = Field(description="the secret the git host signs webhooks with")
    default_branch: str = "main"
    github_id: int | None = Field(default=None, description="the host's numeric repository id, if known")


class RepoOut(BaseModel):
    """A registered repository; the webhook secret is never part of it."""

    object: Literal["repository"] = "repository"
    id: str
    name: str
    clone_url: str
    default_branch: str
    github_id: int | None = None
    created_at: datetime

    @classmethod
    def from_record(cls, record: RepoRecord) -> RepoOut:
        return cls(
            id=record.id,
            name=record.name,
            clone_url=record.clone_url,
            default_branch=record.default_branch,
            github_id=record.github_id,
            created_at=record.created_at,
        )


class RepoList(BaseModel):
    object: Literal["list"] = "list"
    data: list[RepoOut]
