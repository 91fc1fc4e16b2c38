"""``on.schedule`` as Temporal Schedules: what the push workflow hands ``ci_sync_schedules``.

Each cron entry of each workflow file on the default branch's head is one Temporal Schedule
(id ``ci-schedule:<repo id>:<hash of path>:<n>``, searchable by ``TenantId``/``RepoId``). Its
action starts ``CIPushWorkflow`` for event ``schedule`` with the file's path and the cron as
written (``github.event.schedule``): at each tick the push resolves the default branch's head
then, lists that one file, and runs it if it still has the schedule. A push to the default
branch syncs the repository's schedules with its files: new entries are created, changed ones
updated, and those whose file or entry is gone deleted.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from pydantic import BaseModel, Field
from temporalio.common import RetryPolicy

from workflows.ci.types.push import PushContext

ACTIVITY_SYNC_SCHEDULES = "ci_sync_schedules"
SCHEDULE_PREFIX = "ci-schedule:"
SYNC_START_TO_CLOSE = timedelta(seconds=60)
SYNC_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30), maximum_attempts=10
)


def schedule_id(repo_id: str, path: str, index: int) -> str:
    digest = hashlib.sha256(path.encode()).hexdigest()[:16]
    return f"{SCHEDULE_PREFIX}{repo_id}:{digest}:{index}"


class SyncSchedulesInput(BaseModel):
    """The schedules a repository's default branch asks for, as of the push ``push``."""

    push: PushContext
    # Workflow path -> its cron entries as written (files without ``on.schedule`` absent).
    schedules: dict[str, list[str]] = Field(default_factory=dict)
    # When the push was accepted: an older push's sync never undoes a newer one's.
    received_at: datetime


class SyncSchedulesResult(BaseModel):
    created: list[str] = Field(default_factory=list)
    updated: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)
    unchanged: list[str] = Field(default_factory=list)
    stale: bool = False
