"""``leasehold readmodel rebuild``: write the read model again from the engine's open executions.

Temporal is authoritative for what an open execution is doing; the read model only mirrors
it. When the two disagree (a row lost with a restored database, a write that never landed, an
execution started before its workflow wrote snapshots), this command asks every open video
job, CI run and CI push of this deployment (its orchestration queue) for its state and writes
it through ``write_versioned``, with the same mapping and versions the projection activities
use. A row already at a newer version is left alone, so the command is safe to run at any
time, as often as wanted, beside running workers. Closed executions are not rebuilt: their
last snapshot is final, and the engine may already have forgotten them.

The version is the history length read *before* the query: the state answered can only be
newer than that, so a later snapshot from the workflow still wins over the rebuilt row.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from cli.common import UsageError, add_data_dir_arguments, admin_settings, open_database

if TYPE_CHECKING:
    from sqlalchemy.orm import sessionmaker
    from temporalio.client import Client, WorkflowHandle

log = logging.getLogger(__name__)

VIDEO = "VideoJobWorkflow"
CI_RUN = "CIRunWorkflow"
CI_PUSH = "CIPushWorkflow"
# A query is answered by a worker; one that no worker answers must not hold the command up.
QUERY_TIMEOUT = timedelta(seconds=10)
# Executions rebuilt at once: enough to be quick, few enough to spare the engine and workers.
CONCURRENCY = 8


@dataclass
class Tally:
    """What happened to the open executions of one workflow type."""

    seen: int = 0
    written: int = 0
    # The row was already at this version or newer (or the job was deleted).
    unchanged: int = 0
    # Could not be read (no worker answered, or it closed meanwhile); named in the log.
    failed: int = 0


@dataclass
class RebuildReport:
    """Per workflow type: ``{"VideoJobWorkflow": Tally, ...}``."""

    kinds: dict[str, Tally] = field(default_factory=lambda: {VIDEO: Tally(), CI_RUN: Tally(), CI_PUSH: Tally()})

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {kind: asdict(tally) for kind, tally in self.kinds.items()}


def open_executions_query(queue: str) -> str:
    """The visibility query for this deployment's open executions the read model mirrors."""
    types = ", ".join(f'"{name}"' for name in (VIDEO, CI_RUN, CI_PUSH))
    return f'ExecutionStatus = "Running" AND TaskQueue = "{queue}" AND WorkflowType IN ({types})'


async def _rebuild_video(handle: WorkflowHandle, factory: sessionmaker, version: int) -> bool:
    from activities.video.projection import row_values
    from leasehold.records.versioned import write_versioned
    from leasehold.records.video.deletions import is_deleted
    from leasehold.records.video.jobs import VideoJobRecord
    from workflows.video.job import VideoJobWorkflow

    state = await handle.query(VideoJobWorkflow.state, rpc_timeout=QUERY_TIMEOUT)
    if await asyncio.to_thread(is_deleted, factory, state.job_id):
        return False  # deleted by its owner: its row must not come back

    def write() -> bool:
        with factory.begin() as session:
            return write_versioned(
                session,
                VideoJobRecord.__table__,  # type: ignore[arg-type]
                {"job_id": state.job_id},
                row_values(state),
                version,
            )

    return await asyncio.to_thread(write)


async def _rebuild_ci_run(handle: WorkflowHandle, factory: sessionmaker, version: int) -> bool:
    from activities.ci.projection import annotation_rows, run_rows
    from leasehold.records.ci.runs import write_run
    from workflows.ci.run import CIRunWorkflow

    state = await handle.query(CIRunWorkflow.state, rpc_timeout=QUERY_TIMEOUT)
    run, jobs, attempts = run_rows(state)
    annotations = annotation_rows(state)

    def write() -> bool:
        with factory.begin() as session:
            return write_run(session, run, jobs, attempts, version, annotations)

    return await asyncio.to_thread(write)


async def _rebuild_ci_push(client: Client, handle: WorkflowHandle, factory: sessionmaker, version: int) -> bool:
    from activities.ci.projection import push_row
    from leasehold.records.ci.runs import write_push
    from workflows.ci.push import CIPushWorkflow
    from workflows.ci.types.projection import CIPushSnapshot
    from workflows.ci.types.push import CIPushInput

    state = await handle.query(CIPushWorkflow.state, rpc_timeout=QUERY_TIMEOUT)
    # The push state does not name its tenant, repository or commit: the start input does.
    async for event in handle.fetch_history_events():
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        [inp] = await client.data_converter.decode(payloads, [CIPushInput])
        break
    else:
        raise RuntimeError(f"push {handle.id} has no history")
    snapshot = CIPushSnapshot.of(inp, state, version)

    def write() -> bool:
        with factory.begin() as session:
            return write_push(session, push_row(snapshot), version)

    return await asyncio.to_thread(write)


async def rebuild_open_executions(client: Client, factory: sessionmaker, queue: str) -> RebuildReport:
    """Write the state of every open execution on ``queue`` to the read model (newer rows win)."""
    from workflows.ci.types.projection import snapshot_version

    report = RebuildReport()
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(workflow_id: str, run_id: str | None, kind: str) -> None:
        tally = report.kinds[kind]
        async with gate:
            handle = client.get_workflow_handle(workflow_id, run_id=run_id)
            try:
                described = await handle.describe()
                if kind == VIDEO:
                    written = await _rebuild_video(handle, factory, described.history_length)
                else:
                    # CI versions carry the execution's start, as its own snapshots do.
                    version = snapshot_version(described.start_time, described.history_length)
                    if kind == CI_RUN:
                        written = await _rebuild_ci_run(handle, factory, version)
                    else:
                        written = await _rebuild_ci_push(client, handle, factory, version)
            except Exception as exc:
                # One execution that cannot answer must not stop the others.
                log.warning("could not rebuild %s %s: %s", kind, workflow_id, exc)
                tally.failed += 1
                return
        if written:
            tally.written += 1
        else:
            tally.unchanged += 1

    tasks = []
    async for execution in client.list_workflows(open_executions_query(queue)):
        if execution.workflow_type not in report.kinds:
            continue
        report.kinds[execution.workflow_type].seen += 1
        tasks.append(asyncio.create_task(one(execution.id, execution.run_id, execution.workflow_type)))
    await asyncio.gather(*tasks)
    return report


def cmd_readmodel_rebuild(args: argparse.Namespace) -> int:
    from leasehold.temporal import connect
    from workflows.queues import orchestration_queue

    settings = admin_settings(args)
    factory = open_database(settings)

    async def run() -> RebuildReport:
        try:
            client = await connect(settings, identity="leasehold-readmodel-rebuild")
        except RuntimeError as exc:
            raise UsageError(f"cannot reach Temporal at {settings.temporal_address}: {exc}") from None
        return await rebuild_open_executions(client, factory, orchestration_queue(settings.queue_prefix))

    report = asyncio.run(run())
    print(json.dumps(report.as_dict()))
    return 1 if any(t.failed for t in report.kinds.values()) else 0


def add_commands(sub: Any) -> None:
    """Add the ``readmodel`` subcommands to the top-level parser's subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    add_data_dir_arguments(common)
    readmodel = sub.add_parser("readmodel", help="the SQL read model of jobs, runs and pushes")
    readmodel_sub = readmodel.add_subparsers(dest="readmodel_command", required=True)
    rebuild = readmodel_sub.add_parser(
        "rebuild",
        parents=[common],
        help="write every open execution's state from Temporal into the read model (newer rows win)",
    )
    rebuild.set_defaults(func=cmd_readmodel_rebuild)
