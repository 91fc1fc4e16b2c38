"""The read model of video jobs: one row per job, what listings, status reads and admission use.

Temporal runs the job; this row mirrors it. The API inserts the row (version 0, ``queued``)
when it accepts the job, in the same transaction that counts the owner's open jobs, so the job
is in its owner's list as soon as the submit returns and the per-user cap holds across API
replicas. The workflow then writes a snapshot of its ``VideoJobState`` at each transition
(``version`` = its history length then), through ``write_versioned``.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, DateTime, Float, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from leasehold.records.base import Base, utcnow
from leasehold.records.versioned import VersionedRow


class VideoJobRecord(VersionedRow, Base):
    """One video job as users see it; ``status`` is a ``VideoStatus`` value, or ``expired`` once
    the lifecycle deleted its content, and ``state`` the whole ``VideoJobState``
    (``model_dump(mode="json")``)."""

    __tablename__ = "video_jobs"

    job_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(64))
    tier: Mapped[str] = mapped_column(String(16))
    # sha256 of the resolved request: the same idempotency key with another body is refused.
    request_hash: Mapped[str] = mapped_column(String(64))
    # The workflow was started (the transactional outbox: rows still False are started by the
    # API's background starter).
    engine_started: Mapped[bool] = mapped_column(Boolean, default=False)
    attempts_started: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # How the API dispatched the generation task (Temporal fairness): written once at submit,
    # never by the workflow's snapshots, read by the capacity tracker's fairness replay.
    fairness_key: Mapped[str | None] = mapped_column(String(64), nullable=True)
    fairness_weight: Mapped[float | None] = mapped_column(Float, nullable=True)

    __table_args__ = (
        Index("ix_video_jobs_owner", "tenant_id", "user_id", "created_at"),
        Index("ix_video_jobs_owner_status", "tenant_id", "user_id", "status"),
        Index("ix_video_jobs_model_status", "model", "status", "created_at"),
        Index("ix_video_jobs_expiry", "status", "expires_at"),
        # The orphan sweep pages through jobs closed in a time window.
        Index("ix_video_jobs_closed", "status", "completed_at"),
        Index("ix_video_jobs_outbox", "engine_started", "created_at"),
    )
