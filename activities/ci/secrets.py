"""Where the CI job activity gets the values of the secrets a job references.

The CI worker holds no key that opens secrets. When an attempt starts, the run workflow hands
it a random token for that attempt (``AttemptGrant.secrets_token``); the worker trades the
token at the API (``POST /v1/internal/ci/job-secrets``), which answers only while that attempt
holds the job's lease, only with secrets the job's workflow file declares, and only from the
run's own tenant and repository as the database records them (seed §6.4). Workflows and their
histories carry secret *names* and the token, never values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import httpx

# The API route a worker trades an attempt's token at.
JOB_SECRETS_PATH = "/v1/internal/ci/job-secrets"
TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class SecretRequest:
    """One attempt's claim: which run, job and attempt, its token, and the names it wants."""

    run_id: str
    job_id: str
    attempt: int
    token: str
    names: list[str]


class SecretsUnavailable(RuntimeError):
    """The broker could not be asked (infrastructure: a new attempt may succeed)."""


class SecretsRefused(RuntimeError):
    """The broker refused the claim (the attempt is not the job's current lease holder)."""


class SecretSource(Protocol):
    def fetch(self, request: SecretRequest) -> dict[str, str]:
        """``{NAME: value}`` for the names that have a secret (others are absent)."""


class ApiSecretSource:
    """The API as the secrets broker."""

    def __init__(self, base_url: str) -> None:
        self._url = base_url.rstrip("/") + JOB_SECRETS_PATH

    def fetch(self, request: SecretRequest) -> dict[str, str]:
        body = {
            "run_id": request.run_id,
            "job_id": request.job_id,
            "attempt": request.attempt,
            "names": request.names,
        }
        try:
            response = httpx.post(
                self._url,
                json=body,
                headers={"Authorization": f"Bearer {request.token}"},
                timeout=TIMEOUT_SECONDS,
            )
        except httpx.HTTPError as exc:
            raise SecretsUnavailable(f"the secrets broker at {self._url} is unreachable: {exc}") from None
        if response.status_code in (401, 403, 404):
            raise SecretsRefused(f"the secrets broker refused this attempt ({response.status_code})")
        if response.status_code != 200:
            raise SecretsUnavailable(f"the secrets broker answered {response.status_code}")
        values = response.json().get("secrets", {})
        return {str(k): str(v) for k, v in values.items()}


class NoSecrets:
    """A source without secrets (tests of the engine that need none)."""

    def fetch(self, request: SecretRequest) -> dict[str, str]:
        return {}
