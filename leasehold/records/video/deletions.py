"""Tombstones of deleted video jobs.

Deleting a job removes its assets at once, but Temporal removes an execution asynchronously
(and a dev server may keep a closed one until retention), so the API records the deletion
here: a deleted job answers 404 right away, drops out of listings, and its idempotency key
cannot quietly bring it back.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Index, String, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column, sessionmaker

from leasehold.records.base import Base, utcnow


class VideoDeletion(Base):
    """One deleted video job."""

    __tablename__ = "video_deletions"

    job_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str] = mapped_column(String(64))
    deleted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    __table_args__ = (Index("ix_video_deletions_owner", "tenant_id", "user_id"),)


def record_deletion(factory: sessionmaker, job_id: str, tenant_id: str, user_id: str) -> None:
    """Mark ``job_id`` deleted; recording it twice is not an error."""
    try:
        with factory.begin() as session:
            session.add(VideoDeletion(job_id=job_id, tenant_id=tenant_id, user_id=user_id))
    except IntegrityError:
        pass  # already deleted (a retried DELETE)


def is_deleted(factory: sessionmaker, job_id: str) -> bool:
    with factory() as session:
        return session.get(VideoDeletion, job_id) is not None


def deleted_by(factory: sessionmaker, tenant_id: str, user_id: str) -> set[str]:
    """The ids of every job this user deleted."""
    with factory() as session:
        rows = session.scalars(
            select(VideoDeletion.job_id).where(VideoDeletion.tenant_id == tenant_id, VideoDeletion.user_id == user_id)
        )
        return set(rows)
