"""Snapshots the push and run workflows write to the read model (``ci_pushes``, ``ci_runs``).

A snapshot is the workflow's whole state at one moment and a version that orders it: writes
of the same execution arrive late, twice or out of order, and the newest one wins.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel

if TYPE_CHECKING:
    from temporalio.workflow import Info

from workflows.ci.types.push import CIPushInput, CIPushState
from workflows.ci.types.run import CIRunState

ACTIVITY_PROJECT_RUN = "ci_project_run"
ACTIVITY_PROJECT_PUSH = "ci_project_push"

# Temporal keeps each execution's history length below 2**20 events by a wide margin (its
# hard limit is 51,200), so the start time can sit above it; see ``snapshot_version``.
_HISTORY_BITS = 20
# Milliseconds are counted from here so the versions stay far below ``LIFECYCLE_VERSION``
# (2**62, for lifecycle writes that nothing from the engine may follow) for a century.
_EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def snapshot_version(execution_started: datetime, history_length: int) -> int:
    """The version of a snapshot taken at ``history_length`` of an execution started then.

    The history length alone orders one execution's snapshots. A push or run id can be run
    again by a new execution (a push whose git work failed is redelivered; a run whose history
    the engine has forgotten is pushed again), whose history starts short: prefixing the
    execution's start time makes the newer execution's snapshots win over the older one's.
    """
    started_ms = max(0, int(execution_started.timestamp() * 1000) - _EPOCH_MS)
    return (started_ms << _HISTORY_BITS) | min(history_length, (1 << _HISTORY_BITS) - 1)


def current_snapshot_version(info: Info) -> int:
    """``snapshot_version`` of the running execution now (call with ``workflow.info()``)."""
    return snapshot_version(info.workflow_start_time, info.get_current_history_length())


class CIRunSnapshot(BaseModel):
    """Input of ``ci_project_run``: a run's state at ``version``."""

    state: CIRunState
    version: int


class CIPushSnapshot(BaseModel):
    """Input of ``ci_project_push``: a push's state at ``version``, and whose push it is (the
    push state itself does not name its tenant or repository)."""

    state: CIPushState
    version: int
    tenant_id: str
    repo_id: str
    commit_sha: str
    ref: str
    received_at: datetime

    @classmethod
    def of(cls, inp: CIPushInput, state: CIPushState, version: int) -> CIPushSnapshot:
        """The snapshot of the push ``inp`` started, in ``state``."""
        push = inp.push
        return cls(
            state=state,
            version=version,
            tenant_id=push.tenant_id,
            repo_id=push.repo_id,
            commit_sha=push.commit_sha,
            ref=push.ref,
            received_at=inp.received_at,
        )
