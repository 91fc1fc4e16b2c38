"""Recording an accepted push: its workflow started (idempotently) and its first read-model
row written. The webhook and the generic push endpoint (``api.routers.ci.hooks``) call it."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import sessionmaker
from temporalio.client import Client
from temporalio.service import RPCError

from activities.ci.projection import push_row
from api.errors import from_temporal
from clients.ci.push_input import push_input
from clients.ci.start import start_push
from leasehold.records.ci.plans import get_plan
from leasehold.records.ci.repos import RepoRecord
from leasehold.records.ci.runs import write_push
from leasehold.records.ci.variables import variables_for
from leasehold.settings import Settings
from workflows.ci.types.projection import CIPushSnapshot
from workflows.ci.types.push import CIPushInput, CIPushState, PullRequestInfo

log = logging.getLogger(__name__)

# GitHub waits 10 s for an answer; a slow Temporal must not make us miss that.
START_TIMEOUT_SECONDS = 5.0


async def record_push(
    client: Client,
    settings: Settings,
    db: sessionmaker,
    repo: RepoRecord,
    sha: str,
    ref: str,
    delivery: str | None,
    pull_request: PullRequestInfo | None = None,
    event: dict[str, Any] | None = None,
    event_name: str | None = None,
    dispatch_key: str = "",
    action: str = "",
) -> str:
    """Durably record a push (idempotent on repository + commit + ref); returns the push id.
    The tenant's plan (fairness weight, concurrency cap) is resolved now and travels with it,
    and so does the webhook payload (``event``), which jobs see as ``github.event``."""
    plan = await asyncio.to_thread(get_plan, db, settings, repo.tenant_id)
    variables = await asyncio.to_thread(variables_for, db, repo.tenant_id, repo.id)
    inp = push_input(
        settings,
        repo,
        sha,
        ref,
        delivery,
        pull_request,
        plan,
        event,
        variables=variables,
        event_name=event_name,
        dispatch_key=dispatch_key,
        action=action,
    )
    try:
        pid = await asyncio.wait_for(start_push(client, inp), timeout=START_TIMEOUT_SECONDS)
    except (RPCError, TimeoutError) as exc:
        call = f"recording a push of {repo.id} {ref}@{sha[:12]}"
        raise from_temporal(exc, "could not record the push; deliver it again", call=call) from None
    await asyncio.to_thread(_write_accepted, db, inp, pid)
    return pid


def _write_accepted(db: sessionmaker, inp: CIPushInput, pid: str) -> None:
    """The push's row at version 0, so it is in its tenant's reads as soon as it is accepted;
    the push workflow's own snapshots (newer versions) replace it, and a redelivery of a push
    already there changes nothing."""
    snapshot = CIPushSnapshot.of(inp, CIPushState(push_id=pid), 0)
    try:
        with db.begin() as session:
            write_push(session, push_row(snapshot), snapshot.version)
    except SQLAlchemyError:
        # The push is durable in the engine, and its workflow writes the row at its start.
        log.warning("could not write the accepted push %s to the read model", pid, exc_info=True)
