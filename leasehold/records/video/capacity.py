"""The capacity tracker's leader lease and the snapshot it publishes, one row per deployment.

Measuring capacity costs engine calls (DescribeTaskQueue, a describe per generating job), so
one API replica measures for the whole deployment: whichever holds the lease (``try_lead``),
renewed at every refresh and taken over by another replica once it lapses. The leader
publishes what it measured (``publish``); the other replicas plan from the latest publication
(``published``). Lease times are the replicas' clocks: a skew of a few seconds only delays a
takeover, and two leaders for a moment only measure twice.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import JSON, DateTime, String, func, or_, select, update
from sqlalchemy.orm import Mapped, mapped_column, sessionmaker

from leasehold.records.base import Base, utcnow
from leasehold.records.versioned import dialect_insert
from leasehold.records.video.jobs import VideoJobRecord


class CapacitySnapshot(Base):
    """The lease of one deployment's capacity tracker and its latest published measurement."""

    __tablename__ = "video_capacity_snapshots"

    # The deployment (its orchestration queue: several deployments may share a database).
    deployment: Mapped[str] = mapped_column(String(128), primary_key=True)
    owner: Mapped[str] = mapped_column(String(128))
    lease_expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    published_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    snapshot: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


def try_lead(db: sessionmaker, deployment: str, owner: str, lease_seconds: float) -> bool:
    """Take or renew the lease of ``deployment`` for ``owner``; ``True`` if ``owner`` holds it now."""
    now = utcnow()
    expires = now + timedelta(seconds=lease_seconds)
    with db.begin() as session:
        renewed = session.execute(
            update(CapacitySnapshot)
            .where(
                CapacitySnapshot.deployment == deployment,
                or_(CapacitySnapshot.owner == owner, CapacitySnapshot.lease_expires_at < now),
            )
            .values(owner=owner, lease_expires_at=expires)
        )
        if renewed.rowcount:  # type: ignore[attr-defined]
            return True
        inserted = session.execute(
            dialect_insert(session, CapacitySnapshot)
            .values(deployment=deployment, owner=owner, lease_expires_at=expires)
            .on_conflict_do_nothing(index_elements=["deployment"])
        )
        return bool(inserted.rowcount)  # type: ignore[attr-defined]


def publish(db: sessionmaker, deployment: str, owner: str, snapshot: dict[str, Any]) -> bool:
    """Publish ``snapshot`` if ``owner`` still holds the lease; ``True`` if it was published."""
    with db.begin() as session:
        done = session.execute(
            update(CapacitySnapshot)
            .where(CapacitySnapshot.deployment == deployment, CapacitySnapshot.owner == owner)
            .values(snapshot=snapshot, published_at=utcnow())
        )
        return bool(done.rowcount)  # type: ignore[attr-defined]


def published(db: sessionmaker, deployment: str) -> tuple[datetime, dict[str, Any]] | None:
    """The latest publication of ``deployment``: when, and what."""
    with db() as session:
        row = session.get(CapacitySnapshot, deployment)
        if row is None or row.published_at is None or row.snapshot is None:
            return None
        return row.published_at, row.snapshot


def completed_since(db: sessionmaker, model: str, gpu_class: str, since: datetime) -> int:
    """Jobs of ``model`` generated on ``gpu_class`` that completed after ``since`` (the read model:
    visibility has no search attribute for the class)."""
    with db() as session:
        counted = session.scalar(
            select(func.count())
            .select_from(VideoJobRecord)
            .where(
                VideoJobRecord.status.in_(("completed", "expired")),
                VideoJobRecord.completed_at > since,
                VideoJobRecord.model == model,
                VideoJobRecord.state["gpu_class"].as_string() == gpu_class,
            )
        )
        return int(counted or 0)
