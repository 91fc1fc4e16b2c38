"""What the run workflow hands the git-host status reporter (``activities.ci.status_report``).

A run whose repository has a reporter (``CIRunInput.report_status``, read when its push was
listed) reports each of its rounds twice: ``pending`` when the round starts, then its final
state. The state travels whole, so the activity needs no read model to name jobs or annotations;
the console's run page (``target_url``) comes from the reporting worker's settings.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, Field
from temporalio.common import RetryPolicy

from workflows.ci.types.run import CIRunState, RunStatus

ACTIVITY_REPORT_STATUS = "ci_report_status"

# The git host may be slow or rate-limited for a while: keep trying for an hour, at most a
# minute apart (a rate limit's Retry-After overrides the back-off, the activity says when).
STATUS_START_TO_CLOSE = timedelta(seconds=60)
STATUS_SCHEDULE_TO_CLOSE = timedelta(hours=1)
STATUS_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    non_retryable_error_types=["GitHostRefused"],
)


class StatusReport(BaseModel):
    """One report: the run's state at the start (``final`` false) or end of its round ``round``."""

    state: CIRunState
    round: int
    final: bool


class StatusReportResult(BaseModel):
    """What one report did: keys sent now, keys found already sent, refusals with the host's words."""

    sent: list[str] = Field(default_factory=list)
    already: list[str] = Field(default_factory=list)
    refused: dict[str, str] = Field(default_factory=dict)
    reporter: bool = True


def commit_state(status: RunStatus, final: bool) -> str:
    """GitHub's commit status ``state`` for a run's status (a cancelled run is an ``error``)."""
    if not final:
        return "pending"
    return {RunStatus.SUCCESS: "success", RunStatus.FAILURE: "failure"}.get(status, "error")
