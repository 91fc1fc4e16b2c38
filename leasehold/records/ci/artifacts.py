"""CI artifacts (``actions/upload-artifact``): one row per artifact of a run.

A row is created when a job's ``CreateArtifact`` call starts an upload (``uploading``), and
becomes ``finalized`` with its size and digest when ``FinalizeArtifact`` ends it; only
finalized rows are listed and downloadable. Names are unique within a run, as on GitHub: a
second upload of a name fails, except from a later attempt of the job that made the first
(a retried job replaces its own artifacts). The bytes (the zip the client uploaded) live in
the object store under ``ci/<tenant>/<run>/artifacts/<id>.zip``. Each row expires with the
tenant's log retention (GitHub keeps artifacts and logs for the same period, 90 days by
default); the retention workflow removes expired ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Integer, String, UniqueConstraint, select
from sqlalchemy.orm import Mapped, mapped_column, sessionmaker

from leasehold.records.base import Base, from_row, utcnow

UPLOADING = "uploading"
FINALIZED = "finalized"


class CIArtifact(Base):
    __tablename__ = "ci_artifacts"
    __table_args__ = (UniqueConstraint("run_id", "name", name="uq_ci_artifacts_run_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(String(64), index=True)
    repo_id: Mapped[str] = mapped_column(String(64))
    run_id: Mapped[str] = mapped_column(String(128), index=True)
    job_id: Mapped[str] = mapped_column(String(128))
    attempt: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(256))
    state: Mapped[str] = mapped_column(String(16))
    size: Mapped[int] = mapped_column(BigInteger, default=0)
    digest: Mapped[str | None] = mapped_column(String(100), nullable=True)
    object_key: Mapped[str] = mapped_column(String(512))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


@dataclass(frozen=True)
class Artifact:
    id: int
    tenant_id: str
    run_id: str
    job_id: str
    attempt: int
    name: str
    state: str
    size: int
    digest: str | None
    object_key: str
    created_at: datetime
    expires_at: datetime


class ArtifactConflict(ValueError):
    """The run already has an artifact of that name (from another job, or this attempt)."""


def _record(row: CIArtifact) -> Artifact:
    return from_row(Artifact, row)


def artifact_key(tenant_id: str, run_id: str, artifact_id: int) -> str:
    return f"ci/{tenant_id}/{run_id}/artifacts/{artifact_id}.zip"


def start_upload(
    factory: sessionmaker,
    tenant_id: str,
    repo_id: str,
    run_id: str,
    job_id: str,
    attempt: int,
    name: str,
    expires_at: datetime,
) -> tuple[Artifact, str | None]:
    """A new ``uploading`` row, and the object key of the artifact it replaces (an earlier
    attempt's of the same job), if any; ``ArtifactConflict`` when the name is taken."""
    with factory.begin() as session:
        row = session.scalar(select(CIArtifact).where(CIArtifact.run_id == run_id, CIArtifact.name == name))
        replaced = None
        if row is not None:
            if row.job_id != job_id or (row.attempt >= attempt and row.state == FINALIZED):
                raise ArtifactConflict(f"an artifact named {name!r} already exists in this run")
            replaced = row.object_key if row.state == FINALIZED else None
            session.delete(row)
            session.flush()
        row = CIArtifact(
            tenant_id=tenant_id,
            repo_id=repo_id,
            run_id=run_id,
            job_id=job_id,
            attempt=attempt,
            name=name,
            state=UPLOADING,
            size=0,
            object_key="",
            created_at=utcnow(),
            expires_at=expires_at,
        )
        session.add(row)
        session.flush()
        row.object_key = artifact_key(tenant_id, run_id, row.id)
        return _record(row), replaced


def finalize(factory: sessionmaker, artifact_id: int, size: int, digest: str | None) -> Artifact | None:
    with factory.begin() as session:
        row = session.get(CIArtifact, artifact_id)
        if row is None:
            return None
        row.state, row.size, row.digest = FINALIZED, size, digest
        return _record(row)


def get_artifact(factory: sessionmaker, artifact_id: int) -> Artifact | None:
    with factory() as session:
        row = session.get(CIArtifact, artifact_id)
        return None if row is None else _record(row)


def run_artifacts(
    factory: sessionmaker, run_id: str, name: str | None = None, artifact_id: int | None = None
) -> list[Artifact]:
    """A run's finalized artifacts (optionally the one named, or the one with that id), oldest first."""
    query = select(CIArtifact).where(CIArtifact.run_id == run_id, CIArtifact.state == FINALIZED)
    if name is not None:
        query = query.where(CIArtifact.name == name)
    if artifact_id is not None:
        query = query.where(CIArtifact.id == artifact_id)
    with factory() as session:
        return [_record(r) for r in session.scalars(query.order_by(CIArtifact.id))]


def delete_artifact(factory: sessionmaker, artifact_id: int) -> Artifact | None:
    with factory.begin() as session:
        row = session.get(CIArtifact, artifact_id)
        if row is None:
            return None
        found = _record(row)
        session.delete(row)
        return found


def expired_artifacts(factory: sessionmaker, now: datetime, limit: int) -> list[Artifact]:
    with factory() as session:
        rows = session.scalars(
            select(CIArtifact).where(CIArtifact.expires_at < now).order_by(CIArtifact.id).limit(limit)
        )
        return [_record(r) for r in rows]
