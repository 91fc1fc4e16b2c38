"""The git-host status reporter against the OpenAPI-validated GitHub stand-in, over real HTTP:
commit statuses, an app's installation token and check runs with annotations, idempotence
(a repeated report and a retried attempt post nothing twice), and the host's error answers
(401, 404, 422, a rate limit with ``Retry-After``)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.ci.status_report import StatusReportActivities
from leasehold.records.ci.secrets import Keyring, KeyringError
from leasehold.records.ci.status_reporters import (
    CIStatusDelivery,
    CIStatusReporter,
    ReporterError,
    ReporterSetting,
    delivery,
    open_reporter,
    put_reporter,
)
from leasehold.webhook_urls import AddressPolicy
from tests.github_standin import GitHubStandIn, new_app
from workflows.ci.types.job import Annotation, AnnotationLevel, StepResult, StepStatus
from workflows.ci.types.run import AttemptStatus, CIRunState, JobAttemptState, JobState, JobStatus, RunStatus
from workflows.ci.types.status import StatusReport

SHA = "a" * 40
TENANT, REPO_ID, REPO = "tenant-a", "repo-1", "acme/widgets"
CONSOLE = "https://ci.example.test"


@pytest.fixture
def db(tmp_path) -> sessionmaker:  # type: ignore[no-untyped-def]
    engine = create_engine(f"sqlite:///{tmp_path / 'status.db'}")
    CIStatusReporter.__table__.create(engine)  # type: ignore[attr-defined]
    CIStatusDelivery.__table__.create(engine)  # type: ignore[attr-defined]
    return sessionmaker(engine, expire_on_commit=False)


@pytest.fixture
def keyring() -> Keyring:
    return Keyring({"k1": os.urandom(32)}, "k1")


@pytest.fixture
def host(github_description) -> Iterator[GitHubStandIn]:  # type: ignore[no-untyped-def]
    standin = GitHubStandIn(github_description)
    server = standin.serve()
    yield standin
    server.shutdown()
    assert standin.violations == [], standin.violations


def _activities(db: sessionmaker, keyring: Keyring) -> StatusReportActivities:
    return StatusReportActivities(db, keyring, CONSOLE, AddressPolicy(["127.0.0.1/32"]), ["http", "https"])


def _state(status: RunStatus = RunStatus.FAILURE) -> CIRunState:
    now = datetime(2026, 12, 4, 3, 0, tzinfo=UTC)
    notes = [
        Annotation(level=AnnotationLevel.ERROR, message=f"broken {i}", file="src/app.py", line=i + 1, title="lint")
        for i in range(60)
    ] + [Annotation(level=AnnotationLevel.WARNING, message="no file")]
    failed = JobState(
        job_id="test",
        name="test",
        status=JobStatus.FAILURE,
        attempt=1,
        started_at=now,
        finished_at=now + timedelta(seconds=5),
        attempts=[
            JobAttemptState(
                attempt=1,
                round=0,
                status=AttemptStatus.FAILURE,
                steps=[StepResult(index=0, name="lint", status=StepStatus.FAILURE, annotations=notes)],
            )
        ],
    )
    ok = JobState(job_id="build", name="build", status=JobStatus.SUCCESS, attempt=1, started_at=now, finished_at=now)
    return CIRunState(
        run_id="run-1",
        tenant_id=TENANT,
        repo_id=REPO_ID,
        commit_sha=SHA,
        ref="refs/heads/main",
        workflow_path=".github/workflows/ci.yml",
        workflow_name="CI",
        status=status,
        created_at=now,
        jobs=[ok, failed],
    )


def test_a_token_posts_pending_then_the_final_state_once(host, db, keyring) -> None:  # type: ignore[no-untyped-def]
    host.tokens["tok-good"] = {REPO}
    put_reporter(db, keyring, TENANT, REPO_ID, ReporterSetting(api_url=host.url, repository=REPO, token="tok-good"))
    acts, env = _activities(db, keyring), ActivityEnvironment()
    running = _state(RunStatus.IN_PROGRESS)
    first = env.run(acts.report_status, StatusReport(state=running, round=0, final=False))
    assert first.sent == ["status:run-1:0:pending"] and not first.refused
    final = env.run(acts.report_status, StatusReport(state=_state(), round=0, final=True))
    assert final.sent == ["status:run-1:0:failure"]
    # Delivered once: the same report again (a replayed task, a retried activity) sends nothing.
    again = env.run(acts.report_status, StatusReport(state=_state(), round=0, final=True))
    assert again.sent == [] and again.already == ["status:run-1:0:failure"]
    posted = host.posted(REPO, SHA)
    assert [s["state"] for s in posted] == ["failure", "pending"]
    assert posted[0]["context"] == "leasehold/CI"
    assert posted[0]["target_url"] == f"{CONSOLE}/console/runs/run-1"
    assert posted[0]["description"] == "Failed: test"
    # A token reports statuses only: check runs need a GitHub App.
    assert host.check_runs == {}


def test_a_retried_attempt_finds_what_the_host_already_has(host, db, keyring) -> None:  # type: ignore[no-untyped-def]
    host.tokens["tok-good"] = {REPO}
    put_reporter(db, keyring, TENANT, REPO_ID, ReporterSetting(api_url=host.url, repository=REPO, token="tok-good"))
    acts = _activities(db, keyring)
    report = StatusReport(state=_state(RunStatus.SUCCESS), round=2, final=True)
    ActivityEnvironment().run(acts.report_status, report)
    # The record is lost (the process died between the host's answer and the write).
    with db.begin() as session:
        session.query(CIStatusDelivery).delete()
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2)
    result = env.run(acts.report_status, report)
    assert result.sent == [] and result.already == ["status:run-1:2:success"]
    assert len(host.posted(REPO, SHA)) == 1


def test_an_app_creates_one_check_run_per_job_with_every_annotation(host, db, keyring) -> None:  # type: ignore[no-untyped-def]
    app = new_app()
    host.apps[app.installation_id] = app
    host.app_repos[app.installation_id] = {REPO}
    setting = ReporterSetting(
        api_url=host.url,
        repository=REPO,
        app_id=app.app_id,
        installation_id=app.installation_id,
        private_key=app.private_key_pem,
    )
    put_reporter(db, keyring, TENANT, REPO_ID, setting)
    acts = _activities(db, keyring)
    result = ActivityEnvironment().run(acts.report_status, StatusReport(state=_state(), round=0, final=True))
    assert not result.refused, result.refused
    assert sorted(result.sent) == ["check:run-1:build:0", "check:run-1:test:0", "status:run-1:0:failure"]
    runs = {r["name"]: r for r in host.check_runs.values()}
    assert runs["test"]["conclusion"] == "failure" and runs["build"]["conclusion"] == "success"
    assert runs["test"]["external_id"] == "check:run-1:test:0"
    # 61 annotations: 50 with the creation, 11 by one update (GitHub takes 50 a request).
    notes = runs["test"]["annotations"]
    assert len(notes) == 61 and runs["test"]["output"]["annotations_count"] == 61
    assert notes[0] == {
        "path": "src/app.py",
        "start_line": 1,
        "end_line": 1,
        "annotation_level": "failure",
        "message": "broken 0",
        "title": "lint",
    }
    assert notes[-1]["path"] == ".github/workflows/ci.yml" and notes[-1]["annotation_level"] == "warning"
    patches = [r for r in host.requests if r["method"] == "PATCH"]
    assert len(patches) == 1
    # Again: nothing new on the host.
    ActivityEnvironment().run(acts.report_status, StatusReport(state=_state(), round=0, final=True))
    assert len(host.check_runs) == 2 and len(host.posted(REPO, SHA)) == 1


def test_the_hosts_refusals_are_recorded_and_never_retried(host, db, keyring) -> None:  # type: ignore[no-untyped-def]
    acts, env = _activities(db, keyring), ActivityEnvironment()
    report = StatusReport(state=_state(RunStatus.SUCCESS), round=0, final=True)
    # 401: a token the host does not know.
    put_reporter(db, keyring, TENANT, REPO_ID, ReporterSetting(api_url=host.url, repository=REPO, token="tok-bad"))
    result = env.run(acts.report_status, report)
    assert result.refused == {"reporter": "401 Bad credentials"} and result.sent == []
    # 404: a repository the token cannot see.
    host.tokens["tok-other"] = {"acme/other"}
    put_reporter(db, keyring, TENANT, REPO_ID, ReporterSetting(api_url=host.url, repository=REPO, token="tok-other"))
    result = env.run(acts.report_status, report)
    assert result.refused == {"status:run-1:0:success": "404 Not Found"}
    row = delivery(db, "status:run-1:0:success")
    assert row is not None and row.outcome == "refused"
    assert host.posted(REPO, SHA) == []
    # 422: what the host refuses as invalid (a commit that is not a sha, answered by the stand-in
    # per the description) is recorded too, with the host's message.
    host.tokens["tok-good"] = {REPO}
    put_reporter(db, keyring, TENANT, REPO_ID, ReporterSetting(api_url=host.url, repository=REPO, token="tok-good"))
    host.description.doc["paths"]["/repos/{owner}/{repo}/statuses/{sha}"]["post"]["parameters"][2]["schema"] = {
        "type": "string",
        "pattern": "^[0-9a-f]{40}$",
    }
    bad = _state(RunStatus.SUCCESS).model_copy(update={"commit_sha": "not-a-sha", "run_id": "run-2"})
    result = env.run(acts.report_status, StatusReport(state=bad, round=0, final=True))
    assert result.refused == {"status:run-2:0:success": "422 Validation Failed"}
    host.violations.clear()  # that violation was the point


def test_a_rate_limit_fails_the_attempt_with_the_hosts_wait(host, db, keyring) -> None:  # type: ignore[no-untyped-def]
    host.tokens["tok-good"] = {REPO}
    put_reporter(db, keyring, TENANT, REPO_ID, ReporterSetting(api_url=host.url, repository=REPO, token="tok-good"))
    acts = _activities(db, keyring)
    report = StatusReport(state=_state(RunStatus.SUCCESS), round=0, final=True)
    host.rate_limit(1)
    with pytest.raises(ApplicationError) as caught:
        ActivityEnvironment().run(acts.report_status, report)
    assert caught.value.type == "GitHostRateLimited" and not caught.value.non_retryable
    assert caught.value.next_retry_delay == timedelta(seconds=1)
    assert host.posted(REPO, SHA) == []
    # The next attempt goes through, once.
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2)
    assert env.run(acts.report_status, report).sent == ["status:run-1:0:success"]
    assert len(host.posted(REPO, SHA)) == 1


def test_the_api_url_obeys_the_address_policy(db, keyring) -> None:  # type: ignore[no-untyped-def]
    put_reporter(
        db, keyring, TENANT, REPO_ID, ReporterSetting(api_url="http://169.254.169.254", repository=REPO, token="t")
    )
    acts = StatusReportActivities(db, keyring, CONSOLE, AddressPolicy(), ["http", "https"])
    result = ActivityEnvironment().run(
        acts.report_status, StatusReport(state=_state(RunStatus.SUCCESS), round=0, final=True)
    )
    assert list(result.refused) == ["reporter"] and "may not reach" in result.refused["reporter"]


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        (ReporterSetting(api_url="https://api.github.com", repository="widgets", token="t"), "repository"),
        (ReporterSetting(api_url="https://api.github.com", repository="a/b", token=" "), "token"),
        (ReporterSetting(api_url="https://api.github.com", repository="a/b", token="t", app_id="1"), "token"),
        (ReporterSetting(api_url="https://api.github.com", repository="a/b", app_id="x"), "app_id"),
        (
            ReporterSetting(api_url="https://api.github.com", repository="a/b", app_id="1", installation_id="2"),
            "private_key",
        ),
    ],
)
def test_a_bad_setting_names_its_field(db, keyring, setting, field) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ReporterError) as caught:
        put_reporter(db, keyring, TENANT, REPO_ID, setting)
    assert caught.value.field == field


def test_credentials_are_sealed_to_their_repository(db, keyring) -> None:  # type: ignore[no-untyped-def]
    put_reporter(
        db, keyring, TENANT, REPO_ID, ReporterSetting(api_url="https://h", repository=REPO, token="s3cret-token")
    )
    put_reporter(db, keyring, TENANT, "repo-2", ReporterSetting(api_url="https://h", repository=REPO, token="other"))
    with db.begin() as session:
        rows = {r.repo_id: r for r in session.query(CIStatusReporter)}
        assert b"s3cret-token" not in rows[REPO_ID].ciphertext
        # Another repository's ciphertext moved onto this row does not open.
        rows[REPO_ID].nonce, rows[REPO_ID].ciphertext = rows["repo-2"].nonce, rows["repo-2"].ciphertext
    with pytest.raises(KeyringError):
        open_reporter(db, keyring, TENANT, REPO_ID)
