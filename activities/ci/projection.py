"""The CI read model's writer: push and run snapshots into ``ci_pushes``, ``ci_runs``, ``ci_jobs``,
``ci_attempts`` and ``ci_annotations``.

The workflows send their whole state with a version; an older or repeated snapshot changes
nothing (``write_versioned``), so the activity can be retried, duplicated or delivered out of
order. A run's job and attempt rows are derived from the snapshot in the same transaction,
and only when it applied, so they always match the run row. Compaction's columns of an
attempt (``log_object_key``, ``log_index``, ``compacted_at``) are never touched here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import sessionmaker
from temporalio import activity

from activities.ci.definitions import CIProjectionDefinition
from leasehold.db_retry import DEFAULT_FAILOVER_SECONDS, in_activity
from leasehold.records.base import utcnow
from leasehold.records.ci.runs import write_push, write_run
from workflows.ci.types.projection import ACTIVITY_PROJECT_PUSH, ACTIVITY_PROJECT_RUN, CIPushSnapshot, CIRunSnapshot
from workflows.ci.types.run import CIRunState

log = logging.getLogger(__name__)


def run_rows(state: CIRunState) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The ``ci_runs`` row, the ``ci_jobs`` rows and the ``ci_attempts`` rows of a snapshot."""
    run = {
        "run_id": state.run_id,
        "tenant_id": state.tenant_id,
        "repo_id": state.repo_id,
        "commit_sha": state.commit_sha,
        "ref": state.ref,
        "workflow_path": state.workflow_path,
        "event": state.event,
        "status": state.status.value,
        "created_at": state.created_at,
        "finished_at": state.finished_at,
        "updated_at": utcnow(),
        "state": state.model_dump(mode="json"),
    }
    jobs = [
        {
            "job_id": job.job_id,
            "tenant_id": state.tenant_id,
            "name": job.name,
            "status": job.status.value,
            "round": job.round,
            "attempt": job.attempt,
            "queued_at": job.queued_at,
            "started_at": job.started_at,
            "finished_at": job.finished_at,
        }
        for job in state.jobs
    ]
    attempts = [
        {
            "job_id": job.job_id,
            "attempt": attempt.attempt,
            "tenant_id": state.tenant_id,
            "status": attempt.status.value,
            "started_at": attempt.started_at,
            "finished_at": attempt.finished_at,
            "log_prefix": attempt.log_prefix,
        }
        for job in state.jobs
        for attempt in job.attempts
    ]
    return run, jobs, attempts


def annotation_rows(state: CIRunState) -> list[dict[str, Any]]:
    """The ``ci_annotations`` rows of a snapshot: every attempt's, numbered in the order its
    steps printed them."""
    rows: list[dict[str, Any]] = []
    for job in state.jobs:
        for attempt in job.attempts:
            ordinal = 0
            for step in attempt.steps:
                for note in step.annotations:
                    ordinal += 1
                    rows.append(
                        {
                            "job_id": job.job_id,
                            "attempt": attempt.attempt,
                            "ordinal": ordinal,
                            "tenant_id": state.tenant_id,
                            "step": note.step,
                            "level": note.level.value,
                            "message": note.message,
                            "title": note.title,
                            "file": note.file,
                            "line": note.line,
                            "end_line": note.end_line,
                            "col": note.column,
                            "end_col": note.end_column,
                        }
                    )
    return rows


def push_row(snapshot: CIPushSnapshot) -> dict[str, Any]:
    """The ``ci_pushes`` row of a push snapshot."""
    return {
        "push_id": snapshot.state.push_id,
        "tenant_id": snapshot.tenant_id,
        "repo_id": snapshot.repo_id,
        "commit_sha": snapshot.commit_sha,
        "ref": snapshot.ref,
        "status": snapshot.state.status.value,
        "received_at": snapshot.received_at,
        "updated_at": utcnow(),
        "state": snapshot.state.model_dump(mode="json"),
    }


@dataclass(eq=False)
class CIProjectionActivities(CIProjectionDefinition):
    """Writes CI snapshots through one session factory (constructor-injected)."""

    factory: sessionmaker
    # Waited out within the attempt (up to its timeout), then by Temporal's retries: a
    # versioned write is safe to repeat.
    failover_seconds: float = DEFAULT_FAILOVER_SECONDS

    @activity.defn(name=ACTIVITY_PROJECT_RUN)
    def project_ci_run(self, inp: CIRunSnapshot) -> bool:
        run, jobs, attempts = run_rows(inp.state)
        annotations = annotation_rows(inp.state)

        def write() -> bool:
            with self.factory.begin() as session:
                return write_run(session, run, jobs, attempts, inp.version, annotations)

        return in_activity(write, self.failover_seconds, f"run {inp.state.run_id} v{inp.version}", log)

    @activity.defn(name=ACTIVITY_PROJECT_PUSH)
    def project_ci_push(self, inp: CIPushSnapshot) -> bool:
        def write() -> bool:
            with self.factory.begin() as session:
                return write_push(session, push_row(inp), inp.version)

        return in_activity(write, self.failover_seconds, f"push {inp.state.push_id} v{inp.version}", log)
