"""CI lifecycle on the orchestration worker: compacting finished attempts' logs, and retention.

Both find their work in the read model and are safe to run twice, concurrently, or after a
crash half-way:

* Compaction of an attempt goes in three steps, each one resumable: (1) write the compacted
  object and record ``log_object_key`` + ``log_index`` on the attempt row (readers switch to it
  at once); (2) delete the chunks; (3) set ``compacted_at``. An attempt row with
  ``log_object_key`` set but no ``compacted_at`` resumes at (2): its chunks may be partly gone,
  so it is never compacted from them again.
* Retention deletes a run only when its row is terminal and it finished more than the tenant's
  retention ago (and never before the run's retry window passed): its objects first, then its
  attempt, job and run rows in one transaction; then the pushes all of whose runs are gone.
* Both also remove what a write killed half-way left under an attempt's or a run's prefix
  (``ObjectStore.delete_interrupted``: a log chunk the worker died writing), once it is older
  than an hour; no listing shows it, so deleting what is listed would keep it forever.

A database that fails over mid-batch is waited out in place (``leasehold.db_retry``,
heartbeating), the batch starting again from its cursor.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, or_, select, update
from sqlalchemy.orm import sessionmaker
from sqlalchemy.sql.elements import ColumnElement
from temporalio import activity

from activities.ci.definitions import CILifecycleDefinition
from activities.ci.log_compaction import build_compacted, compacted_key, read_chunks
from leasehold.db_retry import DEFAULT_FAILOVER_SECONDS, in_activity
from leasehold.records.base import utcnow
from leasehold.records.ci.artifacts import CIArtifact, delete_artifact, expired_artifacts
from leasehold.records.ci.plans import retention_overrides
from leasehold.records.ci.runs import CIAnnotationRecord, CIAttemptRecord, CIJobRecord, CIPushRecord, CIRunRecord
from leasehold.storage import ObjectStore
from workflows.ci.ids import LOG_ROOT, parse_log_key
from workflows.ci.types.job import AttemptStatus
from workflows.ci.types.push import PushStatus
from workflows.ci.types.run import RUN_TERMINAL_STATUSES
from workflows.lifecycle.types import ACTIVITY_APPLY_CI_RETENTION, ACTIVITY_COMPACT_CI_LOGS, BatchResult, LifecycleBatch

log = logging.getLogger(__name__)

RUN_CLOSED = tuple(sorted(s.value for s in RUN_TERMINAL_STATUSES))
PUSH_CLOSED = (PushStatus.DONE.value, PushStatus.FAILED.value)
_PUSH_PHASE = "push|"


def _as_utc(value: datetime) -> datetime:
    # SQLite hands timestamps back naive; they were written in UTC.
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def log_summary(run_state: dict[str, Any], job_id: str, attempt: int) -> dict[str, Any]:
    """The ``LogSummary`` the run's snapshot holds for one attempt (empty when it has none:
    a lost attempt never reported one)."""
    for job in run_state.get("jobs") or []:
        if job.get("job_id") != job_id:
            continue
        for entry in job.get("attempts") or []:
            if entry.get("attempt") == attempt:
                return entry.get("log") or {}
    return {}


def run_log_root(tenant_id: str, run_id: str) -> str | None:
    """``ci/<tenant>/<run id>/``: every log object of the run is below it (``None`` for ids
    that could name more than one run's objects)."""
    if not tenant_id or not run_id or "/" in tenant_id or "/" in run_id:
        return None
    return f"{LOG_ROOT}/{tenant_id}/{run_id}/"


# Compaction --------------------------------------------------------------------------------


def write_compacted(
    store: ObjectStore, factory: sessionmaker, attempt: CIAttemptRecord, run_state: dict[str, Any]
) -> bool:
    """Step 1: the compacted object, then ``log_object_key`` and ``log_index`` on the row."""
    prefix = attempt.log_prefix
    summary = log_summary(run_state, attempt.job_id, attempt.attempt)
    next_seq = int(summary.get("next_seq") or 0)
    # A lost attempt's summary may lag its chunks (or be missing): the store has the last word.
    for key in store.list(prefix):
        parsed = parse_log_key(key)
        if parsed is not None:
            next_seq = max(next_seq, parsed[0] + 1)
    chunks = read_chunks(store, prefix, next_seq, list(summary.get("gaps") or []))
    compacted = build_compacted(chunks, next_seq)
    key = compacted_key(prefix)
    store.put(key, compacted.data, "application/gzip")
    with factory.begin() as session:
        changed = session.execute(
            update(CIAttemptRecord)
            .where(*_attempt_key(attempt), CIAttemptRecord.log_object_key.is_(None))
            .values(log_object_key=key, log_index=compacted.index)
        )
    return bool(changed.rowcount)  # type: ignore[attr-defined]


def delete_chunks(store: ObjectStore, log_prefix: str) -> int:
    """Step 2: delete the attempt's chunks (the compacted object, ``end.json`` and gap markers stay)."""
    deleted = 0
    for key in store.list(log_prefix):
        parsed = parse_log_key(key)
        if parsed is not None and parsed[1] == "log":
            store.delete(key)
            deleted += 1
    return deleted + store.delete_interrupted(log_prefix)


def mark_compacted(factory: sessionmaker, attempt: CIAttemptRecord, now: datetime) -> None:
    """Step 3: ``compacted_at``; the attempt is done."""
    with factory.begin() as session:
        session.execute(
            update(CIAttemptRecord)
            .where(*_attempt_key(attempt), CIAttemptRecord.compacted_at.is_(None))
            .values(compacted_at=now)
        )


def _attempt_key(attempt: CIAttemptRecord) -> list[ColumnElement[bool]]:
    return [
        CIAttemptRecord.run_id == attempt.run_id,
        CIAttemptRecord.job_id == attempt.job_id,
        CIAttemptRecord.attempt == attempt.attempt,
    ]


# Retention ---------------------------------------------------------------------------------


def delete_run(store: ObjectStore, factory: sessionmaker, run_id: str, closed_before: datetime) -> int:
    """Delete one finished run's log objects, then its attempt, job and run rows; returns how many
    objects went. Nothing happens unless the run is still terminal and finished before
    ``closed_before`` (checked again here: a retry may have reopened it)."""
    with factory() as session:
        run = session.get(CIRunRecord, run_id)
        if run is None or not _expired(run, closed_before):
            return 0
        prefixes = {
            a for (a,) in session.execute(select(CIAttemptRecord.log_prefix).where(CIAttemptRecord.run_id == run_id))
        }
    root = run_log_root(run.tenant_id, run.run_id)
    deleted = 0
    if root is not None:
        deleted += store.delete_prefix(root) + store.delete_interrupted(root)
    # Attempts whose prefix lies elsewhere (none are written so, but the row names them).
    for prefix in prefixes:
        if prefix and prefix.endswith("/") and prefix.startswith(f"{LOG_ROOT}/{run.tenant_id}/"):
            deleted += store.delete_prefix(prefix)
    with factory.begin() as session:
        run = session.get(CIRunRecord, run_id, with_for_update=True)
        if run is None or not _expired(run, closed_before):
            return deleted
        session.execute(delete(CIAnnotationRecord).where(CIAnnotationRecord.run_id == run_id))
        # Their zips lay under the run's prefix, gone above.
        session.execute(delete(CIArtifact).where(CIArtifact.run_id == run_id))
        session.execute(delete(CIAttemptRecord).where(CIAttemptRecord.run_id == run_id))
        session.execute(delete(CIJobRecord).where(CIJobRecord.run_id == run_id))
        session.execute(delete(CIRunRecord).where(CIRunRecord.run_id == run_id))
    return deleted


def _expired(run: CIRunRecord, closed_before: datetime) -> bool:
    return run.status in RUN_CLOSED and run.finished_at is not None and _as_utc(run.finished_at) < closed_before


@dataclass(eq=False)
class CILifecycleActivities(CILifecycleDefinition):
    """Log compaction and retention of CI runs; the store and the database are injected."""

    store: ObjectStore
    factory: sessionmaker
    failover_seconds: float = DEFAULT_FAILOVER_SECONDS

    @activity.defn(name=ACTIVITY_COMPACT_CI_LOGS)
    def compact_ci_logs(self, batch: LifecycleBatch) -> BatchResult:
        """Compact up to ``batch_size`` final attempts of finished runs, by (run, job, attempt)."""
        return in_activity(lambda: self._compact(batch), self.failover_seconds, "CI log compaction", log)

    def _compact(self, batch: LifecycleBatch) -> BatchResult:
        now = utcnow()
        size = batch.input.batch_size
        a = CIAttemptRecord
        query = (
            select(a)
            .join(CIRunRecord, CIRunRecord.run_id == a.run_id)
            .where(
                a.status != AttemptStatus.RUNNING.value, a.compacted_at.is_(None), CIRunRecord.status.in_(RUN_CLOSED)
            )
        )
        if batch.cursor:
            run_id, job_id, number = batch.cursor.rsplit("|", 2)
            n = int(number)
            query = query.where(
                or_(
                    a.run_id > run_id,
                    and_(a.run_id == run_id, a.job_id > job_id),
                    and_(a.run_id == run_id, a.job_id == job_id, a.attempt > n),
                )
            )
        with self.factory() as session:
            attempts = list(session.scalars(query.order_by(a.run_id, a.job_id, a.attempt).limit(size)))
            run_ids = {row.run_id for row in attempts}
            by_run = select(CIRunRecord.run_id, CIRunRecord.state).where(CIRunRecord.run_id.in_(run_ids))
            states: dict[str, dict[str, Any]] = {run_id: state for run_id, state in session.execute(by_run)}
        result = BatchResult(done=len(attempts) < size)
        for attempt in attempts:
            activity.heartbeat(attempt.log_prefix)
            if attempt.log_object_key is None:
                write_compacted(self.store, self.factory, attempt, states.get(attempt.run_id) or {})
            result.deleted_objects += delete_chunks(self.store, attempt.log_prefix)
            mark_compacted(self.factory, attempt, now)
            result.processed += 1
            result.cursor = f"{attempt.run_id}|{attempt.job_id}|{attempt.attempt}"
        if result.processed:
            log.info("compacted %d CI attempt logs (%d chunks deleted)", result.processed, result.deleted_objects)
        return result

    @activity.defn(name=ACTIVITY_APPLY_CI_RETENTION)
    def apply_ci_retention(self, batch: LifecycleBatch) -> BatchResult:
        """Delete up to ``batch_size`` runs past their retention; once none is left, the pushes
        past it whose runs are all gone."""
        # A copy per try: the push phase moves the batch's cursor, and a try that met the
        # outage must start again where the batch did.
        return in_activity(
            lambda: self._retain(batch.model_copy(deep=True)), self.failover_seconds, "CI retention", log
        )

    def _retain(self, batch: LifecycleBatch) -> BatchResult:
        now = utcnow()
        inp = batch.input
        overrides = retention_overrides(self.factory)

        def cutoff(days: int) -> datetime:
            return now - timedelta(seconds=max(days * 86400.0, inp.min_retention_seconds))

        def due(column: Any, tenant_column: Any) -> ColumnElement[bool]:
            by_days: dict[int, list[str]] = defaultdict(list)
            for tenant, days in overrides.items():
                by_days[days].append(tenant)
            clauses = [and_(tenant_column.not_in(list(overrides)), column < cutoff(inp.retention_days))]
            clauses += [and_(tenant_column.in_(tenants), column < cutoff(days)) for days, tenants in by_days.items()]
            return or_(*clauses)

        result = BatchResult(done=False)
        # Artifacts kept for less than their run (upload-artifact's retention-days) go first.
        for artifact in expired_artifacts(self.factory, now, inp.batch_size):
            self.store.delete(artifact.object_key)
            delete_artifact(self.factory, artifact.id)
            result.deleted_objects += 1
        if not (batch.cursor or "").startswith(_PUSH_PHASE):
            r = CIRunRecord
            with self.factory() as session:
                runs = session.execute(
                    select(r.run_id, r.tenant_id)
                    .where(r.status.in_(RUN_CLOSED), r.finished_at.is_not(None), due(r.finished_at, r.tenant_id))
                    .order_by(r.finished_at, r.run_id)
                    .limit(inp.batch_size)
                ).all()
            for run_id, tenant_id in runs:
                activity.heartbeat(run_id)
                days = overrides.get(tenant_id, inp.retention_days)
                result.deleted_objects += delete_run(self.store, self.factory, run_id, cutoff(days))
                result.processed += 1
            if len(runs) == inp.batch_size:
                return result
            batch.cursor = _PUSH_PHASE
        result.cursor, pushes_done = self._delete_pushes(batch.cursor or _PUSH_PHASE, inp.batch_size, due, result)
        result.done = pushes_done
        if result.processed:
            log.info("retention deleted %d CI runs/pushes (%d objects)", result.processed, result.deleted_objects)
        return result

    def _delete_pushes(self, cursor: str, size: int, due: Any, result: BatchResult) -> tuple[str, bool]:
        p = CIPushRecord
        query = select(p.push_id, p.received_at, p.state).where(
            p.status.in_(PUSH_CLOSED), due(p.received_at, p.tenant_id)
        )
        position = cursor[len(_PUSH_PHASE) :]
        if position:
            at_text, after_id = position.split("|", 1)
            at = datetime.fromisoformat(at_text)
            query = query.where(or_(p.received_at > at, and_(p.received_at == at, p.push_id > after_id)))
        with self.factory() as session:
            pushes = session.execute(query.order_by(p.received_at, p.push_id).limit(size)).all()
        for push_id, received_at, state in pushes:
            run_ids = [ref.get("run_id") for ref in (state or {}).get("runs") or [] if ref.get("run_id")]
            with self.factory.begin() as session:
                left = session.scalar(select(CIRunRecord.run_id).where(CIRunRecord.run_id.in_(run_ids)).limit(1))
                if left is None:
                    session.execute(delete(CIPushRecord).where(CIPushRecord.push_id == push_id))
                    result.processed += 1
                else:
                    result.skipped += 1
            cursor = f"{_PUSH_PHASE}{_as_utc(received_at).isoformat()}|{push_id}"
        return cursor, len(pushes) < size
