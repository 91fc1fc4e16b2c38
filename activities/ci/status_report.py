"""Reporting a CI run's state to its git host: a commit status per run, check runs per job.

The run workflow calls ``ci_report_status`` (on the orchestration queue) when a round starts
(``pending``) and when it ends (``success``/``failure``/``error``), for repositories with a
reporter (``leasehold.records.ci.status_reporters``). What it sends follows GitHub's REST API:

* ``POST /repos/{owner}/{repo}/statuses/{sha}`` with ``context = leasehold/<workflow name>``,
  ``target_url`` = the console's run page, and a short description;
* with a GitHub App: an installation token (``POST /app/installations/{id}/access_tokens``,
  authenticated by an RS256 JWT the app's key signs), then at the end of a round one
  completed check run per job (``POST /repos/{owner}/{repo}/check-runs``, ``external_id`` =
  the delivery key) carrying the job's annotations, 50 per request (GitHub's limit; the rest by
  ``PATCH``).

Idempotent: every report has a key (``status:<run>:<round>:<state>``,
``check:<run>:<job>:<round>``) recorded once the host accepted it; a retried activity, a
replayed workflow task or a redelivered webhook finds the key and sends nothing. A retry
that may have been accepted before its record (the process died in between) first asks the
host (the commit's statuses, the check runs of that name and ``external_id``).

Answers: 401, 403, 404 and 422 are refusals retrying cannot mend (bad credentials, no access,
unknown repository, invalid request): recorded with the host's message, returned in the
result, never failing the run. A rate limit (403/429 with ``Retry-After`` or
``x-ratelimit-remaining: 0``) and 5xx or network errors fail the attempt, and Temporal retries
it (the rate limit's wait as the next retry's delay). The API URL obeys the same address
policy as webhooks (``leasehold.webhook_urls``): resolved, every address checked, the request
pinned to the checked address, no redirects, no proxy from the environment.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import httpx
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from sqlalchemy.orm import sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.ci.definitions import CIStatusDefinition
from leasehold.db_retry import DEFAULT_FAILOVER_SECONDS, in_activity
from leasehold.records.ci.secrets import Keyring, KeyringError
from leasehold.records.ci.status_reporters import Reporter, delivery, open_reporter, record_delivery
from leasehold.settings import Settings
from leasehold.webhook_urls import AddressPolicy, RefusedUrl, Resolver, parse_url
from workflows.ci.types.job import AnnotationLevel
from workflows.ci.types.run import CIRunState, JobState, JobStatus, RunStatus
from workflows.ci.types.status import ACTIVITY_REPORT_STATUS, StatusReport, StatusReportResult, commit_state

log = logging.getLogger(__name__)

USER_AGENT = "leasehold-ci-status/1"
API_VERSION = "2022-11-28"
# GitHub: a status description is at most 140 characters; 50 annotations per check-run request.
MAX_DESCRIPTION = 140
ANNOTATIONS_PER_REQUEST = 50
MAX_ANNOTATIONS = 1000
MAX_DETAIL = 300


class RateLimited(Exception):
    def __init__(self, wait_seconds: float, message: str) -> None:
        super().__init__(message)
        self.wait_seconds = wait_seconds


class Refused(Exception):
    """The host refused one request for good (404, 410, 422)."""


class ReporterRefused(Refused):
    """Nothing this reporter sends can succeed: 401/403, or a URL the policy refuses."""


@dataclass
class Answer:
    status: int
    body: Any
    headers: httpx.Headers


def _message(body: Any, status: int) -> str:
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return f"{status} {body['message']}"[:MAX_DETAIL]
    return f"HTTP {status}"


class GitHost:
    """GitHub's REST API at one base URL, through the address policy; one token at a time."""

    def __init__(
        self,
        api_url: str,
        policy: AddressPolicy,
        schemes: list[str],
        timeout: float,
        resolver: Resolver | None = None,
    ) -> None:
        try:
            self._url = parse_url(api_url.rstrip("/"), schemes)
        except RefusedUrl as exc:
            raise ReporterRefused(f"api_url refused: {exc}") from None
        self._policy, self._timeout, self._resolver = policy, timeout, resolver

    def call(self, method: str, path: str, auth: str, payload: dict[str, Any] | None = None) -> Answer:
        """One request; ``Refused``/``RateLimited`` as the module says, ``httpx.HTTPError`` else."""
        try:
            address = self._policy.resolve(self._url, self._resolver)
        except RefusedUrl as exc:
            raise ReporterRefused(f"api_url refused: {exc}") from None
        base = self._url.pinned(address).rstrip("/")
        headers = {
            "host": self._url.host_header,
            "accept": "application/vnd.github+json",
            "authorization": auth,
            "user-agent": USER_AGENT,
            "x-github-api-version": API_VERSION,
        }
        extensions = {"sni_hostname": self._url.host} if self._url.scheme == "https" else {}
        with httpx.Client(follow_redirects=False, timeout=self._timeout, trust_env=False) as client:
            response = client.request(method, base + path, json=payload, headers=headers, extensions=extensions)
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = None
        answer = Answer(response.status_code, body, response.headers)
        if response.status_code < 300:
            return answer
        wait = _rate_limit_wait(answer)
        if wait is not None:
            raise RateLimited(wait, _message(body, response.status_code))
        if response.status_code in (401, 403):
            raise ReporterRefused(_message(body, response.status_code))
        if response.status_code in (404, 410, 422):
            raise Refused(_message(body, response.status_code))
        raise httpx.HTTPStatusError(_message(body, response.status_code), request=response.request, response=response)


def _rate_limit_wait(answer: Answer) -> float | None:
    """Seconds to wait when the answer is a rate limit (primary or secondary), else None."""
    if answer.status not in (403, 429):
        return None
    retry_after = answer.headers.get("retry-after")
    if retry_after is not None:
        try:
            return max(1.0, float(retry_after))
        except ValueError:
            return 60.0
    if answer.headers.get("x-ratelimit-remaining") == "0":
        try:
            return max(1.0, float(answer.headers.get("x-ratelimit-reset", "0")) - time.time())
        except ValueError:
            return 60.0
    return 60.0 if answer.status == 429 else None


def app_jwt(app_id: str, private_key_pem: str, now: float | None = None) -> str:
    """The RS256 JWT a GitHub App authenticates with (issued 60 s back for clock drift, 9 min)."""
    now = time.time() if now is None else now

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = b64(json.dumps({"alg": "RS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = {"iat": int(now) - 60, "exp": int(now) + 540, "iss": app_id}
    payload = b64(json.dumps(claims, separators=(",", ":")).encode())
    try:
        key = serialization.load_pem_private_key(private_key_pem.encode(), password=None)
    except (ValueError, TypeError):
        raise ReporterRefused("private_key cannot be read as an unencrypted PEM key") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ReporterRefused("private_key is not an RSA key")
    signature = key.sign(f"{header}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{header}.{payload}.{b64(signature)}"


_DESCRIPTIONS = {
    RunStatus.QUEUED: "Queued",
    RunStatus.IN_PROGRESS: "In progress",
    RunStatus.SUCCESS: "Succeeded",
    RunStatus.FAILURE: "Failed",
    RunStatus.CANCELLED: "Cancelled",
}
_CONCLUSIONS = {
    JobStatus.SUCCESS: "success",
    JobStatus.FAILURE: "failure",
    JobStatus.CANCELLED: "cancelled",
    JobStatus.SKIPPED: "skipped",
}
_LEVELS = {AnnotationLevel.NOTICE: "notice", AnnotationLevel.WARNING: "warning", AnnotationLevel.ERROR: "failure"}


def describe(state: CIRunState, final: bool) -> str:
    """The status's description: the run's state, and which jobs failed."""
    if not final:
        return "Queued" if state.status is RunStatus.QUEUED else "In progress"
    text = _DESCRIPTIONS.get(state.status, state.status.value)
    if state.status is RunStatus.FAILURE:
        failed = [j.name for j in state.jobs if j.status is JobStatus.FAILURE and not j.combinations]
        if failed:
            text += ": " + ", ".join(failed)
        elif state.error:
            text += ": " + state.error
    return text if len(text) <= MAX_DESCRIPTION else text[: MAX_DESCRIPTION - 1] + "…"


def check_annotations(state: CIRunState, job: JobState) -> list[dict[str, Any]]:
    """The job's winning attempt's annotations as GitHub's check-run annotations."""
    attempt = job.current_attempt()
    if attempt is None:
        return []
    found: list[dict[str, Any]] = []
    for step in attempt.steps:
        for note in step.annotations:
            line = note.line or 1
            item: dict[str, Any] = {
                # A note without a file sits on the workflow file, as GitHub Actions shows it.
                "path": note.file or state.workflow_path,
                "start_line": line,
                "end_line": max(note.end_line or line, line),
                "annotation_level": _LEVELS[note.level],
                "message": note.message[: 64 * 1024] or "(empty)",
            }
            if note.title:
                item["title"] = note.title[:255]
            if note.column is not None and item["start_line"] == item["end_line"]:
                item["start_column"] = note.column
                item["end_column"] = max(note.end_column or note.column, note.column)
            found.append(item)
            if len(found) >= MAX_ANNOTATIONS:
                return found
    return found


@dataclass
class _Credentials:
    """How one report authenticates: a token, or an app's installation token made on first use."""

    reporter: Reporter
    host: GitHost
    _installation: str | None = field(default=None)

    def header(self) -> str:
        if self.reporter.token is not None:
            return f"Bearer {self.reporter.token}"
        if self._installation is None:
            info = self.reporter.info
            jwt = app_jwt(info.app_id or "", self.reporter.private_key or "")
            path = f"/app/installations/{quote(info.installation_id or '', safe='')}/access_tokens"
            answer = self.host.call("POST", path, f"Bearer {jwt}", {})
            token = answer.body.get("token") if isinstance(answer.body, dict) else None
            if not isinstance(token, str):
                raise ReporterRefused("the installation token answer has no token")
            self._installation = token
        return f"Bearer {self._installation}"


def build_status_activities(settings: Settings, db: sessionmaker) -> StatusReportActivities:
    """The activity as the orchestration worker hosts it: the settings' policy and console URL."""
    return StatusReportActivities(
        db,
        Keyring.from_settings(settings),
        settings.resolved_public_base_url,
        AddressPolicy(settings.ci_status_allow_cidrs),
        settings.ci_status_schemes,
        settings.ci_status_timeout_seconds,
        settings.database_failover_seconds,
    )


class _Refusal:
    """Around one report's requests: a refusal of that request (404, 410, 422) is recorded under
    its key and ends the report, not the activity; a refusal of the reporter propagates."""

    def __init__(self, owner: StatusReportActivities, key: str, state: CIRunState, result: StatusReportResult) -> None:
        self.owner, self.key, self.state, self.result = owner, key, state, result
        self.remote: str | None = None
        self.refused = False

    def __enter__(self) -> _Refusal:
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> bool:
        if exc is None or isinstance(exc, ReporterRefused) or not isinstance(exc, Refused):
            return False
        self.owner._record(self.key, self.state, "refused", self.remote, str(exc))
        self.result.refused[self.key] = str(exc)
        self.refused = True
        return True


class StatusReportActivities(CIStatusDefinition):
    """``ci_report_status`` with its database, keyring and address policy (orchestration worker)."""

    def __init__(
        self,
        db: sessionmaker,
        keyring: Keyring,
        console_url: str,
        policy: AddressPolicy,
        schemes: list[str],
        timeout_seconds: float = 10.0,
        failover_seconds: float = DEFAULT_FAILOVER_SECONDS,
        resolver: Resolver | None = None,
    ) -> None:
        self._db, self._keyring, self._console = db, keyring, console_url.rstrip("/")
        self._policy, self._schemes, self._timeout = policy, schemes, timeout_seconds
        self._failover, self._resolver = failover_seconds, resolver

    def _db_call(self, call: Callable[[], Any], what: str) -> Any:
        return in_activity(call, self._failover, what, log)

    @activity.defn(name=ACTIVITY_REPORT_STATUS)
    def report_status(self, report: StatusReport) -> StatusReportResult:
        """See the module docstring."""
        state = report.state
        try:
            reporter = self._db_call(
                lambda: open_reporter(self._db, self._keyring, state.tenant_id, state.repo_id), "status reporter"
            )
        except KeyringError as exc:
            log.error("status reporter of %s cannot be opened: %s", state.repo_id, exc)
            return StatusReportResult(refused={"reporter": f"credentials cannot be opened: {exc}"})
        if reporter is None:
            return StatusReportResult(reporter=False)
        result = StatusReportResult()
        try:
            creds = _Credentials(
                reporter, GitHost(reporter.info.api_url, self._policy, self._schemes, self._timeout, self._resolver)
            )
            self._commit_status(report, creds, result)
            if report.final and reporter.token is None:
                for job in state.jobs:
                    if job.combinations or job.status not in _CONCLUSIONS:
                        continue  # a matrix job's combinations are its check runs
                    self._check_run(report, job, creds, result)
        except Refused as exc:
            # Credentials, access or the URL (or a lookup's 404): nothing later in this report can succeed either.
            result.refused.setdefault("reporter", str(exc))
            log.warning("git host refused the report of run %s: %s", state.run_id, exc)
        except RateLimited as exc:
            raise ApplicationError(
                f"git host rate limit: {exc}",
                type="GitHostRateLimited",
                next_retry_delay=timedelta(seconds=exc.wait_seconds),
            ) from None
        except httpx.HTTPError as exc:
            raise ApplicationError(
                f"git host unavailable: {type(exc).__name__}: {exc}"[:MAX_DETAIL], type="GitHostUnavailable"
            ) from None
        return result

    # One commit status ---------------------------------------------------------------------

    def _commit_status(self, report: StatusReport, creds: _Credentials, result: StatusReportResult) -> None:
        state = report.state
        wanted = commit_state(state.status, report.final)
        key = f"status:{state.run_id}:{report.round}:{wanted}"
        if self._known(key, result):
            return
        repo = creds.reporter.info.repository
        body = {
            "state": wanted,
            "target_url": f"{self._console}/console/runs/{quote(state.run_id, safe='')}",
            "description": describe(state, report.final),
            "context": f"leasehold/{state.workflow_name or state.workflow_path}",
        }
        path = f"/repos/{repo}/statuses/{state.commit_sha}"
        if activity.info().attempt > 1 and self._status_exists(creds, repo, state.commit_sha, body):
            self._record(key, state, "delivered", None, "found on the host")
            result.already.append(key)
            return
        with _Refusal(self, key, state, result) as guard:
            answer = creds.host.call("POST", path, creds.header(), body)
        if guard.refused:
            return
        remote = answer.body.get("id") if isinstance(answer.body, dict) else None
        self._record(key, state, "delivered", None if remote is None else str(remote), None)
        result.sent.append(key)

    def _status_exists(self, creds: _Credentials, repo: str, sha: str, body: dict[str, Any]) -> bool:
        """Whether the host already has this exact status (a lost record after its POST)."""
        answer = creds.host.call("GET", f"/repos/{repo}/commits/{sha}/statuses?per_page=100", creds.header())
        for item in answer.body if isinstance(answer.body, list) else []:
            if isinstance(item, dict) and item.get("context") == body["context"]:
                # Newest first: the latest of our context decides.
                return all(item.get(k) == body[k] for k in ("state", "target_url", "description"))
        return False

    # One check run per job -----------------------------------------------------------------

    def _check_run(self, report: StatusReport, job: JobState, creds: _Credentials, result: StatusReportResult) -> None:
        state = report.state
        key = f"check:{state.run_id}:{job.job_id}:{report.round}"
        row = self._db_call(lambda: delivery(self._db, key), f"delivery {key}")
        if row is not None and row.outcome != "partial":
            result.already.append(key)
            return
        repo = creds.reporter.info.repository
        notes = check_annotations(state, job)
        chunks = [notes[i : i + ANNOTATIONS_PER_REQUEST] for i in range(0, len(notes), ANNOTATIONS_PER_REQUEST)] or [[]]
        conclusion = _CONCLUSIONS[job.status]
        title = f"{job.name}: {conclusion}"
        summary = job.error or (f"{len(notes)} annotation(s)" if notes else conclusion)
        remote, done = (row.remote_id, int(row.detail or "0")) if row is not None else (None, 0)
        if remote is None and activity.info().attempt > 1:
            remote, done = self._find_check_run(creds, repo, state.commit_sha, job.name, key)
        with _Refusal(self, key, state, result) as guard:
            guard.remote = remote
            if remote is None:
                payload: dict[str, Any] = {
                    "name": job.name,
                    "head_sha": state.commit_sha,
                    "details_url": f"{self._console}/console/runs/{quote(state.run_id, safe='')}",
                    "external_id": key,
                    "status": "completed",
                    "conclusion": conclusion,
                    "output": {"title": title, "summary": summary[:65535], "annotations": chunks[0]},
                }
                if job.started_at is not None:
                    payload["started_at"] = job.started_at.strftime("%Y-%m-%dT%H:%M:%SZ")
                if job.finished_at is not None:
                    payload["completed_at"] = job.finished_at.strftime("%Y-%m-%dT%H:%M:%SZ")
                answer = creds.host.call("POST", f"/repos/{repo}/check-runs", creds.header(), payload)
                remote, done = str(answer.body["id"]), 1
                guard.remote = remote
                self._record(key, state, "partial", remote, str(done))
            for index in range(done, len(chunks)):
                output = {"title": title, "summary": summary[:65535], "annotations": chunks[index]}
                creds.host.call("PATCH", f"/repos/{repo}/check-runs/{remote}", creds.header(), {"output": output})
                self._record(key, state, "partial", remote, str(index + 1))
        if guard.refused:
            return
        self._record(key, state, "delivered", remote, str(len(chunks)))
        result.sent.append(key)

    def _find_check_run(self, creds: _Credentials, repo: str, sha: str, name: str, key: str) -> tuple[str | None, int]:
        """(id, annotation requests done) of a check run an earlier attempt created, if any."""
        path = f"/repos/{repo}/commits/{sha}/check-runs?check_name={quote(name, safe='')}&filter=all&per_page=100"
        answer = creds.host.call("GET", path, creds.header())
        runs = answer.body.get("check_runs", []) if isinstance(answer.body, dict) else []
        for item in runs:
            if isinstance(item, dict) and item.get("external_id") == key:
                count = int((item.get("output") or {}).get("annotations_count") or 0)
                return str(item["id"]), max(1, -(-count // ANNOTATIONS_PER_REQUEST))
        return None, 0

    # Records -------------------------------------------------------------------------------

    def _known(self, key: str, result: StatusReportResult) -> bool:
        row = self._db_call(lambda: delivery(self._db, key), f"delivery {key}")
        if row is None:
            return False
        result.already.append(key)
        return True

    def _record(self, key: str, state: CIRunState, outcome: str, remote: str | None, detail: str | None) -> None:
        self._db_call(
            lambda: record_delivery(self._db, key, state.tenant_id, state.run_id, outcome, remote, detail),
            f"delivery {key}",
        )
