"""``ci_sync_schedules``: a repository's ``on.schedule`` entries as Temporal Schedules.

See ``workflows.ci.types.schedules`` for the model. The activity runs on the orchestration
worker (it needs the Temporal client, not git): it lists the repository's schedules by their
``RepoId`` search attribute, then creates, updates or deletes them so that they match the
files of the default branch's head. A schedule remembers (memo) the acceptance time of the
push that wrote it (in the action's memo), so a late, older push's sync leaves a newer one's schedules alone.

The cron each schedule runs is GitHub's reading of the file's: UTC, names and weekday 7 made
numeric, the minute field thinned to one run per five minutes at most
(``actions_language.cron``); the expression as written travels as ``github.event.schedule``.
Ticks missed while the server was down are not caught up (GitHub does not either), and a tick
never waits for the last one.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime, timedelta

from temporalio import activity
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from actions_language.cron import every_five_minutes, field_values, parse_cron
from activities.ci.definitions import CIScheduleDefinition
from workflows import search_attributes as sa
from workflows.ci.types.push import CIPushInput, PushContext
from workflows.ci.types.schedules import (
    ACTIVITY_SYNC_SCHEDULES,
    SCHEDULE_PREFIX,
    SyncSchedulesInput,
    SyncSchedulesResult,
    schedule_id,
)
from workflows.queues import orchestration_queue

log = logging.getLogger(__name__)

PUSH_WORKFLOW = "CIPushWorkflow"
WRITTEN_AT = "leasehold_schedule_written_at"
# Each tick's push workflow: ``<this>-<tick time>`` (the server appends the time).
PUSH_ID_PREFIX = "ci-push-schedule:"


def temporal_cron(cron: str) -> str:
    """``cron`` as the schedule runs it: numeric fields (``*`` kept, weekday 7 as 0), thinned."""
    fields = every_five_minutes(cron).split()
    out = []
    for index, text in enumerate(fields):
        if text == "*":
            out.append(text)
            continue
        values = field_values(text, index)
        if index == 4:
            values = {v % 7 for v in values}
        out.append(",".join(str(v) for v in sorted(values)))
    return " ".join(out)


def scheduled_push(push: PushContext, path: str, cron: str) -> PushContext:
    """The context each tick's push starts from: the default branch, the one file, no commit yet."""
    branch = push.default_branch or push.ref.removeprefix("refs/heads/")
    return push.model_copy(
        update={
            "event": "schedule",
            "ref": f"refs/heads/{branch}",
            "commit_sha": "",
            "before": "",
            "pull_request": None,
            "dispatch_workflow": path,
            "dispatch_key": "",
            "inputs": {},
            "event_payload": {"schedule": cron},
        }
    )


def build_schedule(inp: SyncSchedulesInput, path: str, index: int, cron: str) -> Schedule:
    sid = schedule_id(inp.push.repo_id, path, index)
    push = scheduled_push(inp.push, path, cron)
    return Schedule(
        action=ScheduleActionStartWorkflow(
            PUSH_WORKFLOW,
            CIPushInput(push=push, received_at=inp.received_at),
            id=PUSH_ID_PREFIX + sid.removeprefix(SCHEDULE_PREFIX),
            task_queue=orchestration_queue(inp.push.queue_prefix),
            typed_search_attributes=_attributes(push),
            # When the push that wrote it was accepted (see the module docstring).
            memo={WRITTEN_AT: inp.received_at.isoformat()},
        ),
        spec=ScheduleSpec(cron_expressions=[temporal_cron(cron)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.ALLOW_ALL, catchup_window=timedelta(seconds=60)),
        state=ScheduleState(note=f"on.schedule '{cron}' of {path} in {push.repo_full_name}"),
    )


def _attributes(push: PushContext) -> TypedSearchAttributes:
    return TypedSearchAttributes(
        [SearchAttributePair(sa.TENANT_ID, push.tenant_id), SearchAttributePair(sa.REPO_ID, push.repo_id)]
    )


async def _listed(client: Client, repo_id: str) -> set[str]:
    """Ids of the repository's schedules (by their ``RepoId`` search attribute)."""
    prefix = f"{SCHEDULE_PREFIX}{repo_id}:"
    query = f"{sa.REPO_ID.name} = '{repo_id.replace(chr(39), '')}'"
    return {entry.id async for entry in await client.list_schedules(query=query) if entry.id.startswith(prefix)}


async def _written_at(client: Client, sid: str) -> tuple[bool, datetime | None]:
    """(whether the schedule exists, when the push that last wrote it was accepted)."""
    try:
        described = await client.get_schedule_handle(sid).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return False, None
        raise
    action = described.schedule.action
    raw = (getattr(action, "memo", None) or {}).get(WRITTEN_AT)
    if raw is None:
        return True, None
    value = client.data_converter.payload_converter.from_payload(raw, str)
    return True, datetime.fromisoformat(value)


async def _write(client: Client, sid: str, schedule: Schedule, push: PushContext) -> bool:
    """Create the schedule, or replace an existing one's (keeping an operator's pause); created?"""
    try:
        await client.create_schedule(sid, schedule, search_attributes=_attributes(push))
        return True
    except ScheduleAlreadyRunningError:

        def replace(current: ScheduleUpdateInput) -> ScheduleUpdate:
            state = dataclasses.replace(schedule.state, paused=current.description.schedule.state.paused)
            return ScheduleUpdate(schedule=dataclasses.replace(schedule, state=state))

        await client.get_schedule_handle(sid).update(replace)
        return False


class CIScheduleActivities(CIScheduleDefinition):
    """``ci_sync_schedules`` on the orchestration worker (the activity's own Temporal client)."""

    def __init__(self, client: Client | None = None) -> None:
        self._client = client

    @activity.defn(name=ACTIVITY_SYNC_SCHEDULES)
    async def sync_schedules(self, inp: SyncSchedulesInput) -> SyncSchedulesResult:
        """See the module docstring."""
        client = self._client or activity.client()
        repo = inp.push.repo_id
        wanted: dict[str, tuple[str, int, str]] = {}
        for path, crons in sorted(inp.schedules.items()):
            for index, cron in enumerate(crons):
                parse_cron(cron)  # the parser checked it; a bad one here is a bug, not input
                wanted[schedule_id(repo, path, index)] = (path, index, cron)
        result = SyncSchedulesResult()
        for sid in sorted(await _listed(client, repo) | set(wanted)):
            exists, written = await _written_at(client, sid)
            if written is not None and written > inp.received_at:
                result.stale = True  # a newer push already synced this one
                continue
            if sid not in wanted:
                if exists:
                    try:
                        await client.get_schedule_handle(sid).delete()
                    except RPCError as err:
                        if err.status != RPCStatusCode.NOT_FOUND:
                            raise
                    result.deleted.append(sid)
                continue
            path, index, cron = wanted[sid]
            created = await _write(client, sid, build_schedule(inp, path, index, cron), inp.push)
            (result.created if created else result.updated).append(sid)
        log.info(
            "schedules of %s: %d created, %d updated, %d deleted%s",
            repo,
            len(result.created),
            len(result.updated),
            len(result.deleted),
            " (some left to a newer push)" if result.stale else "",
        )
        return result
