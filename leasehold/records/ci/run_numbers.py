"""``github.run_number``: one counter per tenant + repository + workflow file, and each run's number.

A run's number is assigned once, when its push is listed, and kept by run id: a redelivered
webhook, a listing retried by the engine, or a job retried later all see the same number, and
the next run of the same file gets the next one (GitHub's rule: from 1, per workflow, never
changed by a re-run). Two listings racing for the same counter conflict on a key and retry.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from datetime import datetime

from sqlalchemy import DateTime, Integer, String, select, update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Mapped, mapped_column, sessionmaker

from leasehold.records.base import Base, utcnow

# How often an assignment that lost a race (same counter or same run) is tried again.
ASSIGN_ATTEMPTS = 5


class CIRunCounter(Base):
    """The last number given to a run of one workflow file of one repository."""

    __tablename__ = "ci_run_counters"

    tenant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    repo_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    workflow_path: Mapped[str] = mapped_column(String(255), primary_key=True)
    last_number: Mapped[int] = mapped_column(Integer)


class CIRunNumber(Base):
    """The number a run was given (by run id: assigned once)."""

    __tablename__ = "ci_run_numbers"

    run_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    number: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


def assign_run_number(factory: sessionmaker, tenant_id: str, repo_id: str, workflow_path: str, run_id: str) -> int:
    """The run's number: the one it has, else the file's next one (1 for its first run)."""
    key = (
        CIRunCounter.tenant_id == tenant_id,
        CIRunCounter.repo_id == repo_id,
        CIRunCounter.workflow_path == workflow_path,
    )
    for attempt in range(ASSIGN_ATTEMPTS):
        with factory() as session:
            known = session.get(CIRunNumber, run_id)
            if known is not None:
                return known.number
        try:
            with factory.begin() as session:
                # The increment is the transaction's first statement: it takes the write lock
                # (SQLite) or the row lock (Postgres) before reading, so two runs never share
                # a number; a run numbered meanwhile by another listing conflicts on its key.
                bumped = session.execute(
                    update(CIRunCounter).where(*key).values(last_number=CIRunCounter.last_number + 1)
                )
                if bumped.rowcount == 0:
                    session.add(
                        CIRunCounter(tenant_id=tenant_id, repo_id=repo_id, workflow_path=workflow_path, last_number=1)
                    )
                    session.flush()
                number = session.scalar(select(CIRunCounter.last_number).where(*key))
                assert number is not None
                session.add(CIRunNumber(run_id=run_id, tenant_id=tenant_id, number=number, created_at=utcnow()))
            return number
        except (IntegrityError, OperationalError):
            # Lost a race (a first counter row, the same run, a busy database): read again.
            if attempt == ASSIGN_ATTEMPTS - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def numbers_of_runs(factory: sessionmaker, tenant_id: str, run_ids: Collection[str]) -> dict[str, int]:
    """The numbers of those of the tenant's runs that have one (run id -> number), in one read; a
    run listed before numbers were assigned, or another tenant's, is absent."""
    if not run_ids:
        return {}
    query = select(CIRunNumber.run_id, CIRunNumber.number).where(
        CIRunNumber.tenant_id == tenant_id, CIRunNumber.run_id.in_(list(run_ids))
    )
    with factory() as session:
        return {run_id: number for run_id, number in session.execute(query)}
