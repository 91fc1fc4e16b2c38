"""The read model of CI: pushes, runs, their jobs and attempts, and compacted logs.

Temporal runs pushes and runs; these rows mirror them and outlive the engine's retention. The
push and run workflows write a snapshot of their state at each transition (``version`` = the
workflow's history length then) through ``write_versioned``; the job and attempt rows are
derived from the run snapshot in the same transaction, only when that snapshot applied. A
run's log chunks stay in the object store under each attempt's ``log_prefix``; once an attempt
is compacted, ``log_object_key`` names the one object that holds its whole log and
``log_index`` the byte ranges of its sequence numbers. The annotations an attempt's steps
printed (``::error`` and the like) are rows of ``ci_annotations``, written with the attempt.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import (
    JSON,
    DateTime,
    Index,
    Integer,
    String,
    Table,
    Text,
    and_,
    delete,
    func,
    insert,
    or_,
    select,
)
from sqlalchemy.orm import Mapped, Session, mapped_column, sessionmaker

from leasehold.records.base import Base, utcnow
from leasehold.records.versioned import VersionedRow, dialect_insert, write_versioned

Row = TypeVar("Row", bound=Base)


class _CommitRow(VersionedRow):
    """A read-model row of one commit of a repository at a ref: a push or a run (a mixin)."""

    repo_id: Mapped[str] = mapped_column(String(32))
    commit_sha: Mapped[str] = mapped_column(String(64))
    ref: Mapped[str] = mapped_column(String(255))


class CIPushRecord(_CommitRow, Base):
    """One push (repository + commit + ref + event) and the runs it made; ``state`` is its
    ``CIPushState``."""

    __tablename__ = "ci_pushes"

    push_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    __table_args__ = (Index("ix_ci_pushes_repo", "tenant_id", "repo_id", "received_at"),)


class CIRunRecord(_CommitRow, Base):
    """One run (repository + commit + workflow file + event); ``state`` is its ``CIRunState``,
    what ``GET /v1/runs/{id}`` and the log reader use."""

    __tablename__ = "ci_runs"

    run_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    workflow_path: Mapped[str] = mapped_column(String(255))
    event: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    __table_args__ = (
        Index("ix_ci_runs_tenant", "tenant_id", "created_at"),
        Index("ix_ci_runs_repo", "tenant_id", "repo_id", "created_at"),
        Index("ix_ci_runs_finished", "status", "finished_at"),
    )


class CIJobRecord(Base):
    """One job of a run (derived from the run's snapshot)."""

    __tablename__ = "ci_jobs"

    run_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    job_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(24))
    round: Mapped[int] = mapped_column(Integer, default=0)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    queued_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    __table_args__ = (Index("ix_ci_jobs_tenant_status", "tenant_id", "status"),)


class CIAttemptRecord(Base):
    """One attempt of a job, and where its log lives."""

    __tablename__ = "ci_attempts"

    run_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    job_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Object-store prefix of the attempt's chunks (``<prefix><seq:08d>.log``).
    log_prefix: Mapped[str] = mapped_column(String(512))
    # Set by compaction: the one object holding the whole log, and its index
    # (``{"next_seq": n, "gaps": [...], "ranges": [[first_seq, last_seq, offset, length], ...]}``).
    log_object_key: Mapped[str | None] = mapped_column(String(512), nullable=True)
    log_index: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    compacted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    __table_args__ = (
        Index("ix_ci_attempts_compaction", "status", "compacted_at"),
        Index("ix_ci_attempts_tenant", "tenant_id"),
    )


class CIAnnotationRecord(Base):
    """One annotation (``::error``/``::warning``/``::notice``) an attempt's step printed, masked
    and bounded as the worker stored it; ``ordinal`` is its place among the attempt's."""

    __tablename__ = "ci_annotations"

    run_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    job_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    ordinal: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    step: Mapped[int] = mapped_column(Integer)
    level: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text)
    title: Mapped[str | None] = mapped_column(Text, nullable=True)
    file: Mapped[str | None] = mapped_column(Text, nullable=True)
    line: Mapped[int | None] = mapped_column(Integer, nullable=True)
    end_line: Mapped[int | None] = mapped_column(Integer, nullable=True)
    col: Mapped[int | None] = mapped_column(Integer, nullable=True)
    end_col: Mapped[int | None] = mapped_column(Integer, nullable=True)

    __table_args__ = (Index("ix_ci_annotations_tenant_level", "tenant_id", "level"),)


# Writes (the projection activities) ---------------------------------------------------------


# What compaction sets on an attempt row; a run snapshot knows nothing of it and never clears it.
_COMPACTION_COLUMNS = frozenset({"log_object_key", "log_index", "compacted_at"})


def write_run(
    session: Session,
    run: dict[str, Any],
    jobs: list[dict[str, Any]],
    attempts: list[dict[str, Any]],
    version: int,
    annotations: list[dict[str, Any]] | None = None,
) -> bool:
    """Write one run snapshot (``run`` holds ``run_id`` and the ``ci_runs`` columns), and only if
    it is the newest so far, replace the run's job rows, upsert its attempt rows and, when
    ``annotations`` is given, the annotations of attempts whose set changed; ``True`` if it
    applied. Runs in the caller's transaction, so the tables move together."""
    run_id = run["run_id"]
    values = {k: v for k, v in run.items() if k != "run_id"}
    if not write_versioned(session, CIRunRecord.__table__, {"run_id": run_id}, values, version):  # type: ignore[arg-type]
        return False
    # Job and attempt rows: only those that differ from the stored ones are written (a burst's
    # snapshot changes a few of a run's jobs and one attempt or none; rewriting them all was most
    # of a write's cost). A job the snapshot no longer lists loses its row.
    stored_jobs = _upsert_changed(session, CIJobRecord.__table__, run_id, jobs, ("job_id",), _JOB_COLUMNS)  # type: ignore[arg-type]
    gone = stored_jobs - {(job["job_id"],) for job in jobs}
    if gone:
        session.execute(
            delete(CIJobRecord).where(CIJobRecord.run_id == run_id, CIJobRecord.job_id.in_([k for (k,) in gone]))
        )
    _upsert_changed(
        session,
        CIAttemptRecord.__table__,  # type: ignore[arg-type]
        run_id,
        attempts,
        ("job_id", "attempt"),
        _ATTEMPT_COLUMNS,
        keep=_COMPACTION_COLUMNS,
    )
    if annotations is not None:
        _write_annotations(session, run_id, annotations)
    return True


def _write_annotations(session: Session, run_id: str, annotations: list[dict[str, Any]]) -> None:
    """Replace the annotations of each attempt whose count differs from the snapshot's.

    An attempt's annotations arrive all at once, with its result, and never change after: a
    count is enough to tell a snapshot that adds them from one that repeats them, and the rows
    of an attempt are replaced together, so retries and reordering converge.
    """
    wanted: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in annotations:
        wanted.setdefault((row["job_id"], row["attempt"]), []).append({**row, "run_id": run_id})
    stored = {
        (job_id, attempt): count
        for job_id, attempt, count in session.execute(
            select(CIAnnotationRecord.job_id, CIAnnotationRecord.attempt, func.count())
            .where(CIAnnotationRecord.run_id == run_id)
            .group_by(CIAnnotationRecord.job_id, CIAnnotationRecord.attempt)
        )
    }
    stale = [key for key, rows in wanted.items() if stored.get(key, 0) != len(rows)]
    for job_id, attempt in stale:
        session.execute(
            delete(CIAnnotationRecord).where(
                CIAnnotationRecord.run_id == run_id,
                CIAnnotationRecord.job_id == job_id,
                CIAnnotationRecord.attempt == attempt,
            )
        )
        session.execute(insert(CIAnnotationRecord), wanted[(job_id, attempt)])


def _instant(value: Any) -> Any:
    # SQLite hands back naive UTC times and Postgres aware ones; compare them as naive UTC.
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


# What a snapshot says of a job row and of an attempt row (compaction's columns left out).
_JOB_COLUMNS = ("tenant_id", "name", "status", "round", "attempt", "queued_at", "started_at", "finished_at")
_ATTEMPT_COLUMNS = ("tenant_id", "status", "started_at", "finished_at", "log_prefix")


def _upsert_changed(
    session: Session,
    table: Table,
    run_id: str,
    rows: list[dict[str, Any]],
    keys: tuple[str, ...],
    columns: tuple[str, ...],
    keep: frozenset[str] = frozenset(),
) -> set[tuple[Any, ...]]:
    """Upsert those of a run's ``rows`` whose ``columns`` differ from the stored row with the same
    ``keys`` (all of them, never ``keep``); the keys stored before."""
    stored = {
        tuple(getattr(row, k) for k in keys): _fingerprint(row._asdict(), columns)
        for row in session.execute(select(*(table.c[k] for k in (*keys, *columns))).where(table.c.run_id == run_id))
    }
    changed = [
        {**row, "run_id": run_id}
        for row in rows
        if stored.get(tuple(row[k] for k in keys)) != _fingerprint(row, columns)
    ]
    if changed:
        statement = dialect_insert(session, table)
        session.execute(
            statement.on_conflict_do_update(
                index_elements=["run_id", *keys], set_={k: statement.excluded[k] for k in changed[0] if k not in keep}
            ),
            changed,
        )
    return set(stored)


def _fingerprint(row: dict[str, Any], columns: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(_instant(row[k]) for k in columns)


def write_push(session: Session, push: dict[str, Any], version: int) -> bool:
    """Write one push snapshot (``push`` holds ``push_id`` and the ``ci_pushes`` columns);
    ``True`` if it was the newest so far."""
    values = {k: v for k, v in push.items() if k != "push_id"}
    return write_versioned(session, CIPushRecord.__table__, {"push_id": push["push_id"]}, values, version)  # type: ignore[arg-type]


# Reads (the API) ----------------------------------------------------------------------------


def get_run(factory: sessionmaker, tenant_id: str, run_id: str) -> CIRunRecord | None:
    """The tenant's run; ``None`` when it is missing or another tenant's (the same answer)."""
    with factory() as session:
        return session.scalar(
            select(CIRunRecord).where(CIRunRecord.run_id == run_id, CIRunRecord.tenant_id == tenant_id)
        )


@dataclass(frozen=True)
class RunCursor:
    """Where a page of runs ended: the last row's creation time and id (newest first)."""

    created_at: datetime
    run_id: str


def list_runs(
    factory: sessionmaker,
    tenant_id: str,
    *,
    repo_id: str | None = None,
    status: str | None = None,
    after: RunCursor | None = None,
    limit: int = 20,
) -> list[CIRunRecord]:
    """The tenant's runs, newest first, from ``after`` on (keyset paging on the tenant's or
    the repository's index, so a page costs the same however deep it is)."""
    query = select(CIRunRecord).where(CIRunRecord.tenant_id == tenant_id)
    if repo_id is not None:
        query = query.where(CIRunRecord.repo_id == repo_id)
    if status is not None:
        query = query.where(CIRunRecord.status == status)
    if after is not None:
        query = query.where(
            or_(
                CIRunRecord.created_at < after.created_at,
                and_(CIRunRecord.created_at == after.created_at, CIRunRecord.run_id < after.run_id),
            )
        )
    query = query.order_by(CIRunRecord.created_at.desc(), CIRunRecord.run_id.desc()).limit(limit)
    with factory() as session:
        return list(session.scalars(query))


def _tenant_rows(
    factory: sessionmaker,
    model: type[Row],
    tenant_id: str,
    key: dict[str, Any],
    *order_by: Any,
    beyond: Any = None,
    limit: int | None = None,
) -> list[Row]:
    """The tenant's rows of ``model`` whose columns are ``key`` (never another tenant's), and
    ``beyond`` them when given, in ``order_by``, at most ``limit``."""
    table: Any = model
    criteria = [getattr(table, name) == value for name, value in key.items()]
    query = select(model).where(*criteria, table.tenant_id == tenant_id)
    if beyond is not None:
        query = query.where(beyond)
    query = query.order_by(*order_by).limit(limit)
    with factory() as session:
        return list(session.scalars(query))


def get_push(factory: sessionmaker, tenant_id: str, push_id: str) -> CIPushRecord | None:
    """The tenant's push; ``None`` when it is missing or another tenant's."""
    return next(iter(_tenant_rows(factory, CIPushRecord, tenant_id, {"push_id": push_id})), None)


def attempts_of_run(factory: sessionmaker, tenant_id: str, run_id: str) -> list[CIAttemptRecord]:
    """The attempt rows of the tenant's run (empty for another tenant's), by job and attempt."""
    order = (CIAttemptRecord.job_id, CIAttemptRecord.attempt)
    return _tenant_rows(factory, CIAttemptRecord, tenant_id, {"run_id": run_id}, *order)


def get_attempt(
    factory: sessionmaker, tenant_id: str, run_id: str, job_id: str, attempt: int
) -> CIAttemptRecord | None:
    """One attempt row of the tenant's run (where its log lives), or ``None``."""
    key = {"run_id": run_id, "job_id": job_id, "attempt": attempt}
    return next(iter(_tenant_rows(factory, CIAttemptRecord, tenant_id, key)), None)


def jobs_of_run(factory: sessionmaker, tenant_id: str, run_id: str) -> list[CIJobRecord]:
    """The job rows of the tenant's run (empty for another tenant's)."""
    return _tenant_rows(factory, CIJobRecord, tenant_id, {"run_id": run_id}, CIJobRecord.job_id)


def annotations_of_attempt(
    factory: sessionmaker, tenant_id: str, run_id: str, job_id: str, attempt: int, after: int, limit: int
) -> list[CIAnnotationRecord]:
    """Up to ``limit`` annotations of one attempt of the tenant's run, in the order printed,
    those with ``ordinal`` above ``after`` (empty for another tenant's run)."""
    key = {"run_id": run_id, "job_id": job_id, "attempt": attempt}
    beyond = CIAnnotationRecord.ordinal > after
    return _tenant_rows(
        factory, CIAnnotationRecord, tenant_id, key, CIAnnotationRecord.ordinal, beyond=beyond, limit=limit
    )
