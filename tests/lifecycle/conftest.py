"""Fixtures of the lifecycle tests: the read model on SQLite and on Postgres, a local object
store, and rows written the way the projections write them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import sessionmaker

from leasehold.database import init_database
from leasehold.records.ci.runs import CIAttemptRecord, CIJobRecord, CIPushRecord, CIRunRecord
from leasehold.records.video.jobs import VideoJobRecord
from leasehold.storage import LocalObjectStore
from tests.conftest import sqlite_url
from tests.s3_server import moto_s3


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> sessionmaker:
    """The read model's tables on a real SQLite file, then on a real Postgres schema."""
    if request.param == "sqlite":
        return init_database(sqlite_url(tmp_path))
    return init_database(request.getfixturevalue("postgres_url"))


@pytest.fixture
def store(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "objects", b"k" * 32, "http://127.0.0.1:1")


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3 server as a real subprocess on a free loopback port."""
    with moto_s3(tmp_path_factory.mktemp("moto") / "moto.log") as endpoint:
        yield endpoint


def now() -> datetime:
    return datetime.now(UTC)


def add_video_job(
    db: sessionmaker,
    job_id: str,
    status: str,
    *,
    completed_ago: timedelta | None = None,
    expires_in: timedelta | None = None,
    result: dict[str, Any] | None = None,
    version: int = 7,
) -> None:
    """A ``video_jobs`` row as the workflow's projection leaves it."""
    completed_at = now() - completed_ago if completed_ago is not None else None
    expires_at = now() + expires_in if expires_in is not None else None
    state = {
        "job_id": job_id,
        "tenant_id": "tenant-a",
        "user_id": "user-a",
        "tier": "paid",
        "status": status,
        "result": result,
        "completed_at": completed_at.isoformat() if completed_at else None,
        "expires_at": expires_at.isoformat() if expires_at else None,
    }
    with db.begin() as session:
        session.add(
            VideoJobRecord(
                job_id=job_id,
                tenant_id="tenant-a",
                user_id="user-a",
                model="procedural-v1",
                tier="paid",
                status=status,
                version=version,
                request_hash="0" * 64,
                engine_started=True,
                completed_at=completed_at,
                expires_at=expires_at,
                state=state,
            )
        )


def video_result(job_id: str, attempt: int = 2) -> dict[str, Any]:
    return {
        "video_key": f"videos/{job_id}/attempt-{attempt}/video.mp4",
        "thumbnail_key": f"videos/{job_id}/attempt-{attempt}/thumbnail.jpg",
        "attempt": attempt,
    }


def add_ci_run(
    db: sessionmaker,
    run_id: str,
    *,
    tenant_id: str = "tenant-a",
    status: str = "success",
    finished_ago: timedelta | None = timedelta(0),
    attempts: list[dict[str, Any]] | None = None,
) -> None:
    """A ``ci_runs`` row with one job, and its attempt rows (``attempts``: attempt number,
    status, log summary), as the run's projection writes them."""
    finished_at = now() - finished_ago if finished_ago is not None else None
    attempts = attempts or []
    job_state = {
        "job_id": "build",
        "name": "build",
        "status": "success",
        "attempts": [
            {
                "attempt": a["attempt"],
                "round": 0,
                "status": a["status"],
                "log_prefix": f"ci/{tenant_id}/{run_id}/build/attempt-{a['attempt']}/",
                "log": a.get("log"),
            }
            for a in attempts
        ],
    }
    state = {"run_id": run_id, "tenant_id": tenant_id, "status": status, "jobs": [job_state]}
    with db.begin() as session:
        session.add(
            CIRunRecord(
                run_id=run_id,
                tenant_id=tenant_id,
                repo_id="repo1",
                commit_sha="a" * 40,
                ref="refs/heads/main",
                workflow_path=".leasehold/workflows/ci.yml",
                event="push",
                status=status,
                version=9,
                created_at=(finished_at or now()) - timedelta(minutes=5),
                finished_at=finished_at,
                state=state,
            )
        )
        session.add(CIJobRecord(run_id=run_id, job_id="build", tenant_id=tenant_id, name="build", status="success"))
        for a in attempts:
            session.add(
                CIAttemptRecord(
                    run_id=run_id,
                    job_id="build",
                    attempt=a["attempt"],
                    tenant_id=tenant_id,
                    status=a["status"],
                    log_prefix=f"ci/{tenant_id}/{run_id}/build/attempt-{a['attempt']}/",
                )
            )


def add_ci_push(
    db: sessionmaker, push_id: str, run_ids: list[str], *, tenant_id: str = "tenant-a", received_ago: timedelta
) -> None:
    runs = [{"run_id": r, "workflow_id": f"ci-run:{r}", "workflow_path": "ci.yml"} for r in run_ids]
    with db.begin() as session:
        session.add(
            CIPushRecord(
                push_id=push_id,
                tenant_id=tenant_id,
                repo_id="repo1",
                commit_sha="a" * 40,
                ref="refs/heads/main",
                status="done",
                version=5,
                received_at=now() - received_ago,
                state={"push_id": push_id, "status": "done", "runs": runs},
            )
        )


def attempt_row(db: sessionmaker, run_id: str, attempt: int) -> CIAttemptRecord | None:
    with db() as session:
        return session.get(CIAttemptRecord, (run_id, "build", attempt))
