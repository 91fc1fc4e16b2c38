"""CI retention: runs past their tenant's retention go with their logs; recent and open runs stay."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import insert, select
from sqlalchemy.orm import sessionmaker
from temporalio.testing import ActivityEnvironment

from activities.ci.lifecycle import CILifecycleActivities
from leasehold.records.ci.plans import set_log_retention
from leasehold.records.ci.runs import CIAnnotationRecord, CIAttemptRecord, CIJobRecord, CIPushRecord, CIRunRecord
from leasehold.storage import LocalObjectStore
from tests.lifecycle.conftest import add_ci_push, add_ci_run
from workflows.ci.ids import log_chunk_key
from workflows.lifecycle.types import LifecycleBatch, LifecycleInput, LifecycleResult


def retain(store: LocalObjectStore, db: sessionmaker, days: int = 90, min_seconds: float = 0.0) -> LifecycleResult:
    """Run retention batch after batch, as the workflow does."""
    inp = LifecycleInput(batch_size=2, retention_days=days, min_retention_seconds=min_seconds)
    activities = CILifecycleActivities(store, db)
    total = LifecycleResult()
    cursor = None
    for _ in range(20):
        result = ActivityEnvironment().run(activities.apply_ci_retention, LifecycleBatch(input=inp, cursor=cursor))
        total.processed += result.processed
        total.deleted_objects += result.deleted_objects
        if result.done:
            return total
        cursor = result.cursor
    raise AssertionError("retention never finished")


def add_run_with_log(store: LocalObjectStore, db: sessionmaker, run_id: str, **kwargs: object) -> str:
    tenant = str(kwargs.get("tenant_id", "tenant-a"))
    prefix = f"ci/{tenant}/{run_id}/build/attempt-1/"
    store.put(log_chunk_key(prefix, 0), b"log\n")
    store.put(f"{prefix}compacted.log.gz", b"gz")
    add_ci_run(db, run_id, attempts=[{"attempt": 1, "status": "success"}], **kwargs)  # type: ignore[arg-type]
    with db.begin() as session:
        session.execute(
            insert(CIAnnotationRecord),
            [
                {"run_id": run_id, "job_id": "build", "attempt": 1, "ordinal": 1, "tenant_id": tenant}
                | {"step": 0, "level": "error", "message": "broke"}
            ],
        )
    return prefix


def run_ids(db: sessionmaker) -> set[str]:
    with db() as session:
        return set(session.scalars(select(CIRunRecord.run_id)))


def test_old_runs_go_recent_and_open_runs_stay(store: LocalObjectStore, db: sessionmaker) -> None:
    old = add_run_with_log(store, db, "run_old", finished_ago=timedelta(days=91))
    recent = add_run_with_log(store, db, "run_recent", finished_ago=timedelta(days=89))
    # Open: no finish time, created long ago (waiting for a worker, or retried).
    live = add_run_with_log(store, db, "run_open", status="in_progress", finished_ago=None)
    # A terminal status with a finish time older than retention but reopened by a retry
    # would be in_progress: covered above. Another tenant's old run goes too.
    other = add_run_with_log(store, db, "run_other", tenant_id="tenant-b", finished_ago=timedelta(days=400))
    add_ci_push(db, "push_old", ["run_old", "run_other"], received_ago=timedelta(days=92))
    add_ci_push(db, "push_mixed", ["run_old", "run_recent"], received_ago=timedelta(days=92))

    result = retain(store, db)
    assert run_ids(db) == {"run_recent", "run_open"}
    assert store.list(old) == [] and store.list(other) == []
    assert len(store.list(recent)) == 2 and len(store.list(live)) == 2
    with db() as session:
        assert set(session.scalars(select(CIAttemptRecord.run_id))) == {"run_recent", "run_open"}
        assert set(session.scalars(select(CIJobRecord.run_id))) == {"run_recent", "run_open"}
        assert set(session.scalars(select(CIAnnotationRecord.run_id))) == {"run_recent", "run_open"}
        # A push goes once all its runs are gone; one with a run left stays.
        assert set(session.scalars(select(CIPushRecord.push_id))) == {"push_mixed"}
    assert result.processed == 3  # two runs, one push
    assert result.deleted_objects == 4

    again = retain(store, db)
    assert (again.processed, again.deleted_objects) == (0, 0)


def test_a_tenants_plan_sets_its_retention(store: LocalObjectStore, db: sessionmaker) -> None:
    set_log_retention(db, "tenant-short", 7)
    set_log_retention(db, "tenant-long", 365)
    add_run_with_log(store, db, "run_short", tenant_id="tenant-short", finished_ago=timedelta(days=8))
    add_run_with_log(store, db, "run_long", tenant_id="tenant-long", finished_ago=timedelta(days=100))
    add_run_with_log(store, db, "run_default", finished_ago=timedelta(days=100))
    retain(store, db)
    assert run_ids(db) == {"run_long"}

    with pytest.raises(ValueError, match="log_retention_days"):
        set_log_retention(db, "tenant-short", 0)
    with pytest.raises(ValueError, match="log_retention_days"):
        set_log_retention(db, "tenant-short", 3651)


def test_retention_waits_out_the_retry_window(store: LocalObjectStore, db: sessionmaker) -> None:
    set_log_retention(db, "tenant-short", 1)
    add_run_with_log(store, db, "run_retryable", tenant_id="tenant-short", finished_ago=timedelta(days=2))
    retain(store, db, min_seconds=3 * 86400)
    assert run_ids(db) == {"run_retryable"}
    retain(store, db, min_seconds=86400)
    assert run_ids(db) == set()


def test_artifacts_go_with_their_run_or_when_they_expire(store: LocalObjectStore, db: sessionmaker) -> None:
    from datetime import UTC, datetime

    from leasehold.records.ci.artifacts import finalize, run_artifacts, start_upload

    now = datetime.now(UTC)

    def artifact(run_id: str, name: str, expires_in: timedelta) -> str:
        made, _ = start_upload(db, "tenant-a", "repo", run_id, "build", 1, name, now + expires_in)
        store.put(made.object_key, b"PK zip")
        finalize(db, made.id, 6, "sha256:x")
        return made.object_key

    add_run_with_log(store, db, "run_old", finished_ago=timedelta(days=91))
    add_run_with_log(store, db, "run_new", finished_ago=timedelta(days=1))
    with_run = artifact("run_old", "old-report", timedelta(days=30))
    short = artifact("run_new", "short-lived", timedelta(seconds=-1))
    kept = artifact("run_new", "kept", timedelta(days=89))
    retain(store, db)
    assert not store.exists(with_run) and not store.exists(short)
    assert store.exists(kept)
    assert run_artifacts(db, "run_old") == []
    assert [a.name for a in run_artifacts(db, "run_new")] == ["kept"]
