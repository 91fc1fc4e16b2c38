"""The activities CI's workflows call (the runs', and the lifecycle's), as definitions:
registered name, input and result.

The implementations need git, subprocesses, sandboxes, the database and the object store; a
workflow must not load any of that (the orchestration worker and the API import the
workflows). So each implementation class subclasses its definition here, which imports only
temporalio and the payload types, and the workflows call
``workflow.execute_activity_method(CIJobDefinition.run_job, ...)``: typed like video's calls,
without the weight. The names are what running executions scheduled; they never change.
"""

from __future__ import annotations

from temporalio import activity

from workflows.ci.types.job import ACTIVITY_RUN_JOB, JobActivityInput, JobResult
from workflows.ci.types.projection import ACTIVITY_PROJECT_PUSH, ACTIVITY_PROJECT_RUN, CIPushSnapshot, CIRunSnapshot
from workflows.ci.types.push import ACTIVITY_LIST_WORKFLOWS, ListWorkflowsInput, ListWorkflowsResult
from workflows.ci.types.reconcile import (
    ACTIVITY_RECONCILE_LIST,
    ACTIVITY_RECONCILE_REPO,
    ReconcileInput,
    ReconcileRepoInput,
    ReconcileRepoResult,
    ReconcileRepos,
)
from workflows.ci.types.schedules import ACTIVITY_SYNC_SCHEDULES, SyncSchedulesInput, SyncSchedulesResult
from workflows.ci.types.semaphore import ACTIVITY_SERVED_QUEUES, ServedQueues, ServedQueuesInput
from workflows.ci.types.status import ACTIVITY_REPORT_STATUS, StatusReport, StatusReportResult
from workflows.lifecycle.types import ACTIVITY_APPLY_CI_RETENTION, ACTIVITY_COMPACT_CI_LOGS, BatchResult, LifecycleBatch


class CIListingDefinition:
    """Implemented by ``activities.ci.listing.CIListingActivities`` (CI workers, control queue)."""

    @activity.defn(name=ACTIVITY_LIST_WORKFLOWS)
    def list_workflows(self, inp: ListWorkflowsInput) -> ListWorkflowsResult:
        """Read and parse the workflow files at the pushed commit; match them against the push."""
        raise NotImplementedError


class CIJobDefinition:
    """Implemented by ``activities.ci.job.CIJobActivities`` (CI workers of the job's ``runs-on``)."""

    @activity.defn(name=ACTIVITY_RUN_JOB)
    def run_job(self, inp: JobActivityInput) -> JobResult:
        """Run one attempt of a job; its own failure is a result, not an error."""
        raise NotImplementedError


class CIReconcileDefinition:
    """Implemented by ``activities.ci.reconcile.CIReconcileActivities`` (CI workers, control queue)."""

    @activity.defn(name=ACTIVITY_RECONCILE_LIST)
    def list_repos(self, inp: ReconcileInput) -> ReconcileRepos:
        """The registered repositories to look at, oldest first."""
        raise NotImplementedError

    @activity.defn(name=ACTIVITY_RECONCILE_REPO)
    def reconcile_repo(self, inp: ReconcileRepoInput) -> ReconcileRepoResult:
        """Push every changed head of a watched branch of one repository."""
        raise NotImplementedError


class CIProjectionDefinition:
    """Implemented by ``activities.ci.projection.CIProjectionActivities`` (orchestration worker)."""

    @activity.defn(name=ACTIVITY_PROJECT_RUN)
    def project_ci_run(self, inp: CIRunSnapshot) -> bool:
        """Write a run's snapshot, its jobs and attempts to the read model; ``True`` if it applied."""
        raise NotImplementedError

    @activity.defn(name=ACTIVITY_PROJECT_PUSH)
    def project_ci_push(self, inp: CIPushSnapshot) -> bool:
        """Write a push's snapshot to the read model; ``True`` if it applied."""
        raise NotImplementedError


class CIStatusDefinition:
    """Implemented by ``activities.ci.status_report.StatusReportActivities`` (orchestration worker)."""

    @activity.defn(name=ACTIVITY_REPORT_STATUS)
    def report_status(self, report: StatusReport) -> StatusReportResult:
        """Report a run round's state to the repository's git host (commit status, check runs)."""
        raise NotImplementedError


class CIScheduleDefinition:
    """Implemented by ``activities.ci.schedules.CIScheduleActivities`` (orchestration worker)."""

    @activity.defn(name=ACTIVITY_SYNC_SCHEDULES)
    async def sync_schedules(self, inp: SyncSchedulesInput) -> SyncSchedulesResult:
        """Make the repository's Temporal Schedules match its default branch's ``on.schedule``."""
        raise NotImplementedError


class CIProbeDefinition:
    """Implemented by ``activities.ci.probe.CIProbeActivities`` (CI workers, probe queue)."""

    @activity.defn(name=ACTIVITY_SERVED_QUEUES)
    async def served_queues(self, inp: ServedQueuesInput) -> ServedQueues:
        """Which of the job queues a CI worker polls now (``DescribeTaskQueue``)."""
        raise NotImplementedError


class CILifecycleDefinition:
    """Implemented by ``activities.ci.lifecycle.CILifecycleActivities`` (orchestration worker)."""

    @activity.defn(name=ACTIVITY_COMPACT_CI_LOGS)
    def compact_ci_logs(self, batch: LifecycleBatch) -> BatchResult:
        """Compact the log chunks of final attempts of finished runs."""
        raise NotImplementedError

    @activity.defn(name=ACTIVITY_APPLY_CI_RETENTION)
    def apply_ci_retention(self, batch: LifecycleBatch) -> BatchResult:
        """Delete runs and pushes past their tenant's retention, with their logs."""
        raise NotImplementedError
