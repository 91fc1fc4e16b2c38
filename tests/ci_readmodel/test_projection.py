"""The CI projection on SQLite and Postgres: run snapshots replayed out of order and twice
(a retry round adding attempts included) leave the same ``ci_runs``, ``ci_jobs``,
``ci_attempts`` and ``ci_annotations`` rows as the snapshots written once in order; compaction's columns survive every
later snapshot; and the read functions answer only the owning tenant."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import sessionmaker
from temporalio.testing import ActivityEnvironment

from activities.ci.projection import CIProjectionActivities
from leasehold.database import init_database
from leasehold.records.ci.runs import (
    CIAnnotationRecord,
    CIAttemptRecord,
    CIJobRecord,
    CIPushRecord,
    CIRunRecord,
    RunCursor,
    annotations_of_attempt,
    attempts_of_run,
    get_attempt,
    get_push,
    get_run,
    jobs_of_run,
    list_runs,
)
from tests.conftest import sqlite_url
from workflows.ci.ids import attempt_log_prefix
from workflows.ci.types.job import Annotation, AnnotationLevel, AttemptStatus, LogSummary, StepResult, StepStatus
from workflows.ci.types.projection import CIPushSnapshot, CIRunSnapshot, snapshot_version
from workflows.ci.types.push import CIPushState, PushStatus, RunRef
from workflows.ci.types.run import CIRunState, JobAttemptState, JobState, JobStatus, RunStatus

TENANT = "tenant-a"
RUN = "run_" + "ab" * 16
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgres"])
def factory(request: pytest.FixtureRequest, tmp_path: Path) -> sessionmaker:
    if request.param == "sqlite":
        return init_database(sqlite_url(tmp_path))
    return init_database(request.getfixturevalue("postgres_url"))


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def attempt(job: str, n: int, round_: int, status: AttemptStatus, started: float) -> JobAttemptState:
    prefix = attempt_log_prefix(TENANT, RUN, job, n)
    final = status != AttemptStatus.RUNNING
    return JobAttemptState(
        attempt=n,
        round=round_,
        status=status,
        worker="w1",
        started_at=at(started),
        finished_at=at(started + 5) if final else None,
        exit_code=(0 if status == AttemptStatus.SUCCESS else 1) if final else None,
        log_prefix=prefix,
        log=LogSummary(prefix=prefix, next_seq=3, ended=True) if final else None,
        # A finished attempt's steps carry what they printed; the first attempt of ``build``
        # printed none, so a job's attempts differ in their annotations.
        steps=[
            StepResult(
                index=i,
                name=f"step {i}",
                status=StepStatus.SUCCESS,
                annotations=[
                    Annotation(level=AnnotationLevel.ERROR, message=f"{job} {n} step {i}", file="a.py", line=3, step=i),
                    Annotation(level=AnnotationLevel.NOTICE, message="<b>kept as text</b>", step=i),
                ],
            )
            for i in range(n + 1)
        ]
        if final and (job, n) != ("build", 1)
        else [],
    )


def run_history() -> list[CIRunState]:
    """The snapshots of one run, in the order its workflow took them: ``build`` fails, ``test``
    is skipped, then a retry round runs ``build`` again (attempt 2) and ``test`` (attempt 1)."""
    state = CIRunState(
        run_id=RUN,
        tenant_id=TENANT,
        repo_id="repo-a",
        commit_sha="c" * 40,
        ref="refs/heads/main",
        workflow_path=".github/workflows/ci.yml",
        created_at=at(0),
        jobs=[JobState(job_id="build", name="build"), JobState(job_id="test", name="test", needs=["build"])],
    )
    build, test = state.jobs
    history: list[CIRunState] = []

    def take() -> None:
        history.append(state.model_copy(deep=True))

    take()
    build.status, build.queued_at = JobStatus.QUEUED, at(1)
    take()
    build.status, build.attempt, build.started_at = JobStatus.IN_PROGRESS, 1, at(2)
    build.attempts.append(attempt("build", 1, 0, AttemptStatus.RUNNING, 2))
    state.status, state.started_at = RunStatus.IN_PROGRESS, at(2)
    take()
    build.attempts[0] = attempt("build", 1, 0, AttemptStatus.FAILURE, 2)
    build.status, build.finished_at, build.exit_code = JobStatus.FAILURE, at(7), 1
    test.status, test.finished_at = JobStatus.SKIPPED, at(7)
    take()
    state.status, state.finished_at = RunStatus.FAILURE, at(7)
    take()
    # Retry round: build and its dependent go back to waiting; attempts accumulate.
    for job in (build, test):
        job.round, job.status, job.attempt = 1, JobStatus.WAITING, 0
        job.queued_at = job.started_at = job.finished_at = None
    state.retries, state.status, state.finished_at = 1, RunStatus.IN_PROGRESS, None
    take()
    build.status, build.attempt, build.started_at = JobStatus.IN_PROGRESS, 2, at(20)
    build.attempts.append(attempt("build", 2, 1, AttemptStatus.RUNNING, 20))
    take()
    build.attempts[1] = attempt("build", 2, 1, AttemptStatus.SUCCESS, 20)
    build.status, build.finished_at, build.exit_code = JobStatus.SUCCESS, at(25), 0
    test.status, test.attempt, test.started_at = JobStatus.IN_PROGRESS, 1, at(26)
    test.attempts.append(attempt("test", 1, 1, AttemptStatus.RUNNING, 26))
    take()
    test.attempts[0] = attempt("test", 1, 1, AttemptStatus.SUCCESS, 26)
    test.status, test.finished_at = JobStatus.SUCCESS, at(31)
    state.status, state.finished_at = RunStatus.SUCCESS, at(31)
    take()
    return history


def snapshots(run_id: str = RUN) -> list[CIRunSnapshot]:
    """``run_history`` as the workflow sends it: versions from history lengths that grow."""
    return [
        CIRunSnapshot(state=s.model_copy(update={"run_id": run_id}), version=snapshot_version(T0, 5 + 7 * i))
        for i, s in enumerate(run_history())
    ]


def project(factory: sessionmaker, snapshot: CIRunSnapshot) -> bool:
    activities = CIProjectionActivities(factory)
    return bool(ActivityEnvironment().run(activities.project_ci_run, snapshot))


def normalized(value: Any) -> Any:
    # SQLite returns naive UTC times, Postgres aware ones: compare them as UTC instants.
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return value


def rows(factory: sessionmaker, run_id: str = RUN) -> dict[str, list[dict[str, Any]]]:
    """Every row of one run in the three tables; its id (and its state's), and ``updated_at``
    (the wall clock of the write), left out so runs written differently can be compared."""
    out: dict[str, list[dict[str, Any]]] = {}
    with factory() as session:
        for model in (CIRunRecord, CIJobRecord, CIAttemptRecord, CIAnnotationRecord):
            table: Any = model.__table__
            keys = [c for c in table.c if c.primary_key]
            found = session.execute(select(table).where(table.c.run_id == run_id).order_by(*keys)).mappings()
            out[model.__tablename__] = [
                {
                    k: ({**v, "run_id": None} if k == "state" else normalized(v))
                    for k, v in r.items()
                    if k not in ("updated_at", "run_id")
                }
                for r in found
            ]
    return out


def test_snapshots_out_of_order_and_twice_converge_on_the_newest(factory: sessionmaker) -> None:
    history = snapshots()
    for snapshot in history:
        assert project(factory, snapshot), "written in order, every snapshot applies"
    expected = rows(factory)
    assert expected["ci_runs"][0]["status"] == "success" and expected["ci_runs"][0]["version"] == history[-1].version
    assert [(a["job_id"], a["attempt"], a["status"]) for a in expected["ci_attempts"]] == [
        ("build", 1, "failure"),
        ("build", 2, "success"),
        ("test", 1, "success"),
    ]
    assert [(j["job_id"], j["status"], j["round"], j["attempt"]) for j in expected["ci_jobs"]] == [
        ("build", "success", 1, 2),
        ("test", "success", 1, 1),
    ]
    assert expected["ci_runs"][0]["state"] == {**history[-1].state.model_dump(mode="json"), "run_id": None}
    assert [
        (a["job_id"], a["attempt"], a["ordinal"], a["level"], a["message"]) for a in expected["ci_annotations"]
    ] == [
        ("build", 2, 1, "error", "build 2 step 0"),
        ("build", 2, 2, "notice", "<b>kept as text</b>"),
        ("build", 2, 3, "error", "build 2 step 1"),
        ("build", 2, 4, "notice", "<b>kept as text</b>"),
        ("build", 2, 5, "error", "build 2 step 2"),
        ("build", 2, 6, "notice", "<b>kept as text</b>"),
        ("test", 1, 1, "error", "test 1 step 0"),
        ("test", 1, 2, "notice", "<b>kept as text</b>"),
        ("test", 1, 3, "error", "test 1 step 1"),
        ("test", 1, 4, "notice", "<b>kept as text</b>"),
    ]
    page = annotations_of_attempt(factory, TENANT, RUN, "build", 2, after=2, limit=3)
    assert [(a.ordinal, a.file, a.line) for a in page] == [(3, "a.py", 3), (4, None, None), (5, "a.py", 3)]
    assert annotations_of_attempt(factory, "tenant-b", RUN, "build", 2, after=0, limit=10) == []

    # The same snapshots under another run id each time, in the same database: shuffled, and
    # every one delivered twice (a retried activity, a duplicate).
    for seed in range(4):
        run_id = f"run_{seed:032x}"
        replay = snapshots(run_id) * 2
        random.Random(seed).shuffle(replay)
        for snapshot in replay:
            project(factory, snapshot)
        assert rows(factory, run_id) == expected, f"order {seed} diverged: {[s.version for s in replay]}"


def test_a_partial_replay_equals_its_newest_snapshot_alone(factory: sessionmaker) -> None:
    history = snapshots()
    # Only the snapshots up to the first round's end (the retry's attempts are not there yet),
    # delivered newest first and then all again in order.
    first_round = history[:5]
    for snapshot in [*reversed(first_round), *first_round]:
        project(factory, snapshot)
    alone = "run_" + "cd" * 16
    project(factory, snapshots(alone)[4])
    assert rows(factory) == rows(factory, alone)
    assert [a.attempt for a in attempts_of_run(factory, TENANT, RUN)] == [1]
    # The retry round then adds its attempts on top.
    for snapshot in history[5:]:
        assert project(factory, snapshot)
    assert [(a.job_id, a.attempt) for a in attempts_of_run(factory, TENANT, RUN)] == [
        ("build", 1),
        ("build", 2),
        ("test", 1),
    ]


def test_compaction_columns_survive_later_snapshots(factory: sessionmaker) -> None:
    history = snapshots()
    for snapshot in history[:5]:
        project(factory, snapshot)
    # Compaction (another activity) sets where build attempt 1's whole log now lives.
    index = {"next_seq": 3, "gaps": [], "ranges": [[0, 2, 0, 100]], "sizes": [10, 10, 10]}
    with factory.begin() as session:
        session.execute(
            update(CIAttemptRecord)
            .where(CIAttemptRecord.run_id == RUN, CIAttemptRecord.job_id == "build", CIAttemptRecord.attempt == 1)
            .values(log_object_key="ci/x/compacted.log.gz", log_index=index, compacted_at=at(100))
        )
    for snapshot in [*history[5:], *history]:
        project(factory, snapshot)
    record = get_attempt(factory, TENANT, RUN, "build", 1)
    assert record is not None
    assert (record.log_object_key, record.log_index) == ("ci/x/compacted.log.gz", index)
    assert normalized(record.compacted_at) == at(100)
    assert record.status == "failure" and record.log_prefix == attempt_log_prefix(TENANT, RUN, "build", 1)


def test_reads_answer_only_the_owning_tenant(factory: sessionmaker) -> None:
    for snapshot in snapshots():
        project(factory, snapshot)
    assert get_run(factory, TENANT, RUN) is not None
    assert get_run(factory, "tenant-b", RUN) is None
    assert attempts_of_run(factory, "tenant-b", RUN) == []
    assert jobs_of_run(factory, "tenant-b", RUN) == []
    assert get_attempt(factory, "tenant-b", RUN, "build", 1) is None
    assert [j.job_id for j in jobs_of_run(factory, TENANT, RUN)] == ["build", "test"]
    assert list_runs(factory, "tenant-b") == []

    push = CIPushSnapshot(
        state=CIPushState(
            push_id="push_1",
            status=PushStatus.DONE,
            runs=[RunRef(run_id=RUN, workflow_id=f"ci-run:{RUN}", workflow_path=".github/workflows/ci.yml")],
        ),
        version=snapshot_version(T0, 12),
        tenant_id=TENANT,
        repo_id="repo-a",
        commit_sha="c" * 40,
        ref="refs/heads/main",
        received_at=T0,
    )
    activities = CIProjectionActivities(factory)
    listing = push.model_copy(update={"state": CIPushState(push_id="push_1"), "version": 0})
    assert ActivityEnvironment().run(activities.project_ci_push, push)
    assert not ActivityEnvironment().run(activities.project_ci_push, listing), "the accepted row never wins"
    found = get_push(factory, TENANT, "push_1")
    assert found is not None and found.status == "done" and found.state["runs"][0]["run_id"] == RUN
    assert get_push(factory, "tenant-b", "push_1") is None
    with factory() as session:
        assert session.scalar(select(CIPushRecord.version)) == push.version


def test_listing_pages_with_a_cursor_newest_first(factory: sessionmaker) -> None:
    base = run_history()[-1]
    activities = CIProjectionActivities(factory)
    created = []
    for i in range(7):
        # Two runs share a creation time: the run id breaks the tie, so no page skips one.
        state = base.model_copy(
            update={"run_id": f"run_{i:032x}", "created_at": at(i // 2 * 10), "repo_id": f"repo-{i % 2}"}
        )
        ActivityEnvironment().run(activities.project_ci_run, CIRunSnapshot(state=state, version=1))
        created.append((state.created_at, state.run_id))
    newest_first = [r for _, r in sorted(created, reverse=True)]
    seen: list[str] = []
    cursor: RunCursor | None = None
    while True:
        page = list_runs(factory, TENANT, after=cursor, limit=3)
        seen.extend(r.run_id for r in page)
        if len(page) < 3:
            break
        cursor = RunCursor(page[-1].created_at, page[-1].run_id)
    assert seen == newest_first
    assert [r.run_id for r in list_runs(factory, TENANT, repo_id="repo-1", limit=10)] == [
        r for r in newest_first if int(r[4:], 16) % 2 == 1
    ]
    assert [r.run_id for r in list_runs(factory, TENANT, status="failure")] == []
