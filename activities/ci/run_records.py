"""What a CI job attempt may trust about the run it serves, and where that comes from.

The job activity's input is whatever the scheduling workflow passed; anyone able to start a
workflow could pass another tenant's id and read that tenant's secrets. So the activity
derives the tenant from records it can check: the workflow that scheduled it (Temporal's
``activity.info().workflow_id``, not a field of the input) must be the run workflow whose id
the input's repository, commit, workflow file, event (and dispatch key) derive to, and the repository's
owner, clone URL and network grant are read from the database, never from the input.

That read is the attempt's first step, before it has done anything, so a database that is
failing over is waited out here (``leasehold.db_retry``, heartbeating) rather than failing the
attempt: the job's few Temporal attempts are for lost workers, not for the database's restarts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy.orm import sessionmaker

from leasehold.db_retry import DEFAULT_FAILOVER_SECONDS, failover_window, keep_activity_alive, through_outage
from leasehold.records.ci.plans import isolation_backend, network_allowed
from leasehold.records.ci.repos import get_repo
from workflows.ci.ids import run_id, run_workflow_id
from workflows.ci.types.job import JobActivityInput

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrustedRun:
    """The facts of a job's run as the records say them."""

    tenant_id: str
    repo_id: str
    clone_url: str
    # The operator let this tenant's jobs ask for network.
    network_allowed: bool
    # The sandbox backend the tenant's plan requires (``leasehold plans isolation``).
    isolation: str = "bubblewrap"


class UntrustedRun(Exception):
    """The input does not match the records: the attempt must not run."""


class RunRecords(Protocol):
    def verify(self, inp: JobActivityInput, workflow_id: str) -> TrustedRun:
        """The run's trusted facts; raises ``UntrustedRun``."""


def check_workflow_id(inp: JobActivityInput, workflow_id: str) -> None:
    """The scheduling workflow is the run the input describes (ids are derived, not chosen)."""
    push = inp.push
    expected = run_workflow_id(run_id(push.repo_id, push.commit_sha, inp.workflow_path, push.event, push.dispatch_key))
    if workflow_id != expected or inp.run_workflow_id != expected or run_workflow_id(inp.run_id) != expected:
        raise UntrustedRun(f"workflow {workflow_id!r} is not the run of {inp.push.repo_id}@{inp.push.commit_sha[:12]}")


@dataclass(eq=False)
class DatabaseRunRecords:
    """Repositories and network grants in the leasehold database.

    Connection-class errors are retried for ``failover_seconds`` (capped to what the calling
    activity's timeouts allow), calling ``heartbeat`` while waiting; by default the running
    activity is heartbeated with the details it started with (nothing of the attempt exists
    yet that newer details could describe), and a cancel ends the wait.
    """

    factory: sessionmaker
    failover_seconds: float = DEFAULT_FAILOVER_SECONDS
    heartbeat: Callable[[], None] = keep_activity_alive

    def verify(self, inp: JobActivityInput, workflow_id: str) -> TrustedRun:
        check_workflow_id(inp, workflow_id)
        what = f"records of {inp.push.repo_id} for job {inp.job.id}"
        return through_outage(
            lambda: self._read(inp), failover_window(self.failover_seconds), what, log, self.heartbeat
        )

    def _read(self, inp: JobActivityInput) -> TrustedRun:
        repo = get_repo(self.factory, inp.push.tenant_id, inp.push.repo_id)
        if repo is None:
            # Missing or another tenant's: the same refusal either way.
            raise UntrustedRun(f"repository {inp.push.repo_id} does not belong to tenant {inp.push.tenant_id}")
        return TrustedRun(
            tenant_id=repo.tenant_id,
            repo_id=repo.id,
            clone_url=repo.clone_url,
            network_allowed=network_allowed(self.factory, repo.tenant_id),
            isolation=isolation_backend(self.factory, repo.tenant_id),
        )
