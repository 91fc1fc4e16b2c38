"""Connecting to Temporal the same way from every process (dev server, cluster or Cloud)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
    TLSConfig,
)
from temporalio.contrib.pydantic import pydantic_data_converter

from leasehold.settings import Settings


async def connect(settings: Settings, identity: str | None = None, lazy: bool = False) -> Client:
    """A client for the configured namespace; TLS and API key make Temporal Cloud work.

    ``lazy`` defers connecting to the first call (and retries it on later calls), so a
    process such as the API can start, and report itself unhealthy, while Temporal is down.
    """
    tls: TLSConfig | bool = settings.temporal_tls
    if settings.temporal_tls and (settings.temporal_tls_client_cert or settings.temporal_tls_server_ca):
        tls = TLSConfig(
            client_cert=settings.temporal_tls_client_cert.read_bytes() if settings.temporal_tls_client_cert else None,
            client_private_key=settings.temporal_tls_client_key.read_bytes()
            if settings.temporal_tls_client_key
            else None,
            server_root_ca_cert=settings.temporal_tls_server_ca.read_bytes()
            if settings.temporal_tls_server_ca
            else None,
        )
    api_key = settings.temporal_api_key.get_secret_value() if settings.temporal_api_key else None
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        tls=tls if api_key is None else (tls or True),
        api_key=api_key,
        data_converter=pydantic_data_converter,
        identity=identity,
        lazy=lazy,
    )


def interval_schedule(workflow: Any, arg: Any, workflow_id: str, task_queue: str, every: timedelta) -> Schedule:
    """A schedule starting ``workflow(arg)`` every ``every`` (the server appends each tick's time
    to ``workflow_id``); overlap SKIP: a tick that finds the last one still running does nothing,
    so a slow pass never piles up."""
    return Schedule(
        action=ScheduleActionStartWorkflow(workflow, arg, id=workflow_id, task_queue=task_queue),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )


async def ensure_schedule(client: Client, schedule_id: str, schedule: Schedule) -> bool:
    """Create ``schedule``, or bring an existing one to it; ``True`` if it was created.

    Idempotent (every worker calls it at start). An existing schedule keeps its state, so an
    operator's pause and its note outlive a worker restart."""
    try:
        await client.create_schedule(schedule_id, schedule)
        return True
    except ScheduleAlreadyRunningError:

        def replace(current: ScheduleUpdateInput) -> ScheduleUpdate:
            return ScheduleUpdate(schedule=dataclasses.replace(schedule, state=current.description.schedule.state))

        await client.get_schedule_handle(schedule_id).update(replace)
        return False
