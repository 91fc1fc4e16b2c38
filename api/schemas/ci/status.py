"""Bodies of ``/v1/repos/{id}/status-reporter``: where a repository's CI results are reported."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from api.schemas.objects import RecordView


class GitHubAppIn(BaseModel):
    """A GitHub App installed on the repository: commit statuses and check runs."""

    model_config = ConfigDict(extra="forbid")

    app_id: str = Field(description="The app's numeric id.")
    installation_id: str = Field(description="The installation's numeric id on the repository's account.")
    private_key: SecretStr = Field(description="The app's PEM private key (write-only).")


class StatusReporterPut(BaseModel):
    """A token (commit statuses) or a GitHub App (statuses and check runs), not both."""

    model_config = ConfigDict(extra="forbid")

    api_url: str = Field(
        default="https://api.github.com",
        description="The REST API's base URL (GitHub Enterprise: https://HOST/api/v3).",
    )
    repository: str | None = Field(
        default=None, description="owner/name on the git host; the repository's own name when omitted."
    )
    token: SecretStr | None = Field(default=None, description="A token with commit statuses write access (write-only).")
    app: GitHubAppIn | None = None


class StatusReporterOut(RecordView):
    """What the API shows of a reporter: never its token or key."""

    repo_id: str
    api_url: str
    repository: str
    kind: str = Field(description="'token' or 'app'.")
    app_id: str | None = None
    installation_id: str | None = None
    updated_at: datetime
