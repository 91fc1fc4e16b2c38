"""Branch heads the CI reconciler has already turned into pushes, per repository.

A lost webhook shows as a head that differs from the one recorded here. Pushes themselves are
deduplicated by their deterministic ids (repository + commit + ref), so a head the webhook
delivered and the reconciler sees too still makes one push; this table only spares re-pushing
unchanged heads every interval (and old heads whose runs Temporal no longer retains).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, String, select
from sqlalchemy.orm import Mapped, mapped_column, sessionmaker

from leasehold.records.base import Base, utcnow


class CIKnownHead(Base):
    """The last commit of one branch of one repository that the reconciler pushed (or skipped)."""

    __tablename__ = "ci_known_heads"

    repo_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    ref: Mapped[str] = mapped_column(String(255), primary_key=True)
    sha: Mapped[str] = mapped_column(String(64))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


def known_heads(factory: sessionmaker, repo_id: str) -> dict[str, str]:
    """ref -> sha of the heads recorded for a repository."""
    with factory() as session:
        rows = session.scalars(select(CIKnownHead).where(CIKnownHead.repo_id == repo_id)).all()
    return {r.ref: r.sha for r in rows}


def record_head(factory: sessionmaker, repo_id: str, ref: str, sha: str) -> None:
    with factory.begin() as session:
        row = session.get(CIKnownHead, (repo_id, ref))
        if row is None:
            session.add(CIKnownHead(repo_id=repo_id, ref=ref, sha=sha, updated_at=utcnow()))
        else:
            row.sha = sha
            row.updated_at = utcnow()
