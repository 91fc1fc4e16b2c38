"""The read model of CI: pushes, runs, their jobs and attempts, and compacted logs.

Temporal runs pushes and runs; these rows mirror them and outlive the engine's retention. The
push and run workflows write a snapshot of their state at each transition (``version`` = the
workflow's history length then) through ``write_versioned``; the job and attempt rows are
derived from the run snapshot in the same transaction, only when that snapshot applied. A
run's log chunks stay in the object store under each attempt's ``log_prefix``; once an attempt
is compacted, ``log_object_key`` names the one object that holds its whole log and
``log_index`` the byte ranges of its sequence numbers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from leasehold.database import Base, utcnow


class CIPushRecord(Base):
    """One push (repository + commit + ref + event) and the runs it made."""

    __tablename__ = "ci_pushes"

    push_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    repo_id: Mapped[str] = mapped_column(String(32))
    commit_sha: Mapped[str] = mapped_column(String(64))
    ref: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16))
    version: Mapped[int] = mapped_column(BigInteger, default=0)
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # ``CIPushState`` as JSON.
    state: Mapped[dict[str, Any]] = mapped_column(JSON)

    __table_args__ = (Index("ix_ci_pushes_repo", "tenant_id", "repo_id", "received_at"),)


class CIRunRecord(Base):
    """One run (repository + commit + workflow file + event)."""

    __tablename__ = "ci_runs"

    run_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    repo_id: Mapped[str] = mapped_column(String(32))
    commit_sha: Mapped[str] = mapped_column(String(64))
    ref: Mapped[str] = mapped_column(String(255))
    workflow_path: Mapped[str] = mapped_column(String(255))
    event: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16))
    version: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # ``CIRunState`` as JSON: what ``GET /v1/runs/{id}`` and the log reader use.
    state: Mapped[dict[str, Any]] = mapped_column(JSON)

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
