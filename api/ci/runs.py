"""Reading the caller's CI run, shared by the runs and logs routers.

Another tenant's run answers 404 exactly like a missing one.
"""

from __future__ import annotations

import asyncio
import re

from temporalio.client import Client
from temporalio.service import RPCError

from api.errors import from_temporal, not_found
from leasehold.client.ci.start import run_state
from leasehold.records.api_keys import Principal
from workflows.ci.types.run import CIRunState

_RUN_ID = re.compile(r"^run_[0-9a-f]{8,64}$")
_JOB_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,99}$")
# A query goes to a worker: bound the wait so a missing worker is a clear 503, not a hang.
QUERY_TIMEOUT_SECONDS = 10.0
RUN_UNAVAILABLE = "the run could not be read now; try again"


async def load_run(client: Client, principal: Principal, run: str) -> CIRunState:
    """The caller's run; 404 when it does not exist or belongs to another tenant."""
    if not _RUN_ID.match(run):
        raise not_found("run")
    try:
        state = await asyncio.wait_for(run_state(client, run), timeout=QUERY_TIMEOUT_SECONDS)
    except (RPCError, TimeoutError) as exc:
        raise from_temporal(exc, RUN_UNAVAILABLE, missing=not_found("run"), call=f"query of run {run}") from None
    if state.tenant_id != principal.tenant_id:
        raise not_found("run")
    return state


def check_job_id(job: str) -> None:
    """404 for a job name no workflow file could declare (before any query is sent)."""
    if not _JOB_ID.match(job):
        raise not_found("job")
