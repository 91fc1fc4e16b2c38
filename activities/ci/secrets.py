"""Where the CI job activity gets the values of the secrets a job references.

The CI worker holds no key that opens secrets. When an attempt starts, the run workflow hands
it a random token for that attempt (``AttemptGrant.secrets_token``); the worker trades the
token at the API (``POST /v1/internal/ci/job-secrets``), which answers only while that attempt
holds the job's lease, only with secrets the job's workflow file declares, and only from the
run's own tenant and repository as the database records them (seed §6.4). Workflows and their
histories carry secret *names* and the token, never values.

A broker whose database is failing over answers 503 with ``Retry-After``; the worker asks again
(heartbeating) for up to the failover window, so the outage does not spend one of the job's few
attempts. A refusal (401, 403, 404) is final at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import httpx

from leasehold.db_retry import DEFAULT_FAILOVER_SECONDS, failover_window, keep_activity_alive, longest_wait

log = logging.getLogger(__name__)

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
    """The API as the secrets broker; an unavailable broker (503, or no answer) is asked again
    for ``failover_seconds``, calling ``heartbeat`` between tries."""

    def __init__(
        self,
        base_url: str,
        failover_seconds: float = DEFAULT_FAILOVER_SECONDS,
        heartbeat: Callable[[], None] | None = None,
    ) -> None:
        self._url = base_url.rstrip("/") + JOB_SECRETS_PATH
        self._failover_seconds = failover_seconds
        self._heartbeat = heartbeat or keep_activity_alive

    def fetch(self, request: SecretRequest) -> dict[str, str]:
        deadline = time.monotonic() + failover_window(self._failover_seconds)
        longest = longest_wait()
        tries = 0
        while True:
            tries += 1
            try:
                return self._fetch_once(request)
            except _Retryable as exc:
                wait = min(max(exc.retry_after, 0.1), longest)
                if time.monotonic() + wait > deadline:
                    raise SecretsUnavailable(str(exc)) from None
                log.warning("secrets for %s/%s: %s (try %d), asking again", request.run_id, request.job_id, exc, tries)
            time.sleep(wait)
            self._heartbeat()

    def _fetch_once(self, request: SecretRequest) -> dict[str, str]:
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
            raise _Retryable(f"the secrets broker at {self._url} is unreachable: {exc}", 1.0) from None
        if response.status_code in (401, 403, 404):
            raise SecretsRefused(f"the secrets broker refused this attempt ({response.status_code})")
        if response.status_code == 503:
            raise _Retryable("the secrets broker is unavailable (503)", _retry_after(response))
        if response.status_code != 200:
            raise SecretsUnavailable(f"the secrets broker answered {response.status_code}")
        values = response.json().get("secrets", {})
        return {str(k): str(v) for k, v in values.items()}


class _Retryable(Exception):
    """The broker is unavailable for now: ask again after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _retry_after(response: httpx.Response) -> float:
    try:
        return float(response.headers.get("retry-after", "1"))
    except ValueError:
        return 1.0


class NoSecrets:
    """A source without secrets (tests of the engine that need none)."""

    def fetch(self, request: SecretRequest) -> dict[str, str]:
        return {}
