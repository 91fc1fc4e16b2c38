"""``/console``: the web console's pages, forms and live streams.

Every page reads through the same code the JSON routers run (``VideoJobs``, ``load_run``, the
runs/logs/repos route functions themselves), with the caller taken from the session cookie
instead of a Bearer header, so ownership, 404 rules and validation are the API's own. Forms
post back here, are checked for CSRF, and answer with a redirect (post/redirect/get). Live
updates are the API's SSE streams re-served under ``/console`` (an ``EventSource`` cannot send
an Authorization header, but it does send the same-origin cookie).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Form, Header, Query, Request
from fastapi.responses import RedirectResponse, Response, StreamingResponse
from pydantic import ValidationError
from sqlalchemy.orm import sessionmaker
from temporalio.client import Client

from api.ci.attempt_ref import AttemptRef
from api.ci.queue_explanation import QueueExplainerDep
from api.ci.runs import AttemptQuery, check_job_id, load_run, stored_run
from api.console import session
from api.console.render import ConsoleRoute, Graph, layout_graph, page
from api.console.session import ConsolePrincipal
from api.deps import CapacityDep, ClientDep, DbDep, SettingsDep, StoreDep
from api.errors import ApiError
from api.forms import string_fields
from api.routers.ci import artifacts as artifacts_router
from api.routers.ci import logs as logs_router
from api.routers.ci import repos as repos_router
from api.routers.ci import runs as runs_router
from api.routers.video import models as models_router
from api.routers.video import videos as videos_router
from api.schemas.ci.runs import RunOut
from api.schemas.video import VideoCreateRequest
from api.video.fleet_view import fleet_decisions
from api.video.jobs import VideoJobs
from api.video.live import LiveProgress
from leasehold.records.api_keys import Principal
from leasehold.records.ci.runs import get_run as get_run_record
from workflows.ci.ids import run_workflow_id
from workflows.ci.types.run import RunStatus
from workflows.video.ids import workflow_id as video_workflow_id

log = logging.getLogger(__name__)

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)

MAX_FORM_FIELDS = 16
MAX_FORM_BYTES = 64 * 1024
VIDEO_PAGE = 50
RUN_PAGE = 50
# The run page's live stream looks at the read model this often and says when the run changed.
RUN_WATCH_SECONDS = 0.5
RUN_STREAM_MAX_SECONDS = 3600.0
CREATE_FIELDS = {"prompt", "model", "seconds", "size", "seed", "steps"}
FINAL_RUN_STATUSES = {RunStatus.SUCCESS.value, RunStatus.FAILURE.value, RunStatus.CANCELLED.value}


async def console_jobs(
    client: ClientDep,
    settings: SettingsDep,
    store: StoreDep,
    db: DbDep,
    principal: ConsolePrincipal,
    capacity: CapacityDep,
    live: Annotated[LiveProgress, Depends(videos_router.get_live)],
) -> VideoJobs:
    """The signed-in caller's video jobs: the object the ``/v1/videos`` routes use."""
    return VideoJobs(client, settings, db, principal, capacity, store, live)


JobsDep = Annotated[VideoJobs, Depends(console_jobs)]
CsrfField = Annotated[str | None, Form(alias=session.CSRF_FIELD, max_length=200)]


@dataclass(frozen=True)
class RunCaller:
    """The signed-in caller with the engine and database the ``/v1/runs`` route functions take."""

    principal: Principal
    client: Client
    db: sessionmaker


def console_run_caller(principal: ConsolePrincipal, client: ClientDep, db: DbDep) -> RunCaller:
    return RunCaller(principal, client, db)


RunCallerDep = Annotated[RunCaller, Depends(console_run_caller)]


def console_attempt_ref(
    run: str, job: str, caller: RunCallerDep, store: StoreDep, attempt: AttemptQuery = None
) -> AttemptRef:
    """``api.ci.attempt_ref.attempt_ref`` with the caller taken from the session cookie."""
    return AttemptRef(run, job, caller.principal, caller.client, caller.db, store, attempt)


ConsoleAttemptDep = Annotated[AttemptRef, Depends(console_attempt_ref)]


def _temporal_link(settings: Any, workflow_id: str) -> str | None:
    base = settings.console_temporal_ui_url
    if not base:
        return None
    return f"{base.rstrip('/')}/namespaces/{settings.temporal_namespace}/workflows/{workflow_id}"


def _redirect(target: str) -> RedirectResponse:
    return RedirectResponse(target, status_code=303)


async def _form(request: Request) -> dict[str, str]:
    """A small urlencoded or multipart form as strings (files refused)."""
    try:
        form = await request.form(max_files=0, max_fields=MAX_FORM_FIELDS, max_part_size=MAX_FORM_BYTES)
    except Exception as exc:
        raise ApiError(400, "invalid_request", "the form could not be read", "body") from exc
    return string_fields(form, "invalid_request", "{name}: file uploads are not accepted")


# Sign-in -----------------------------------------------------------------------------------


@router.get("")
async def console_root() -> RedirectResponse:
    return _redirect("/console/videos")


def _sign_in_page(request: Request, target: str | None, status_code: int = 200, error: str | None = None) -> Response:
    token = session.new_sign_in_token()
    response = page(
        request, "sign_in.html", status_code=status_code, next=session.safe_next(target), token=token, error=error
    )
    session.set_sign_in_cookie(response, request, token)
    return response


@router.get("/sign-in")
async def sign_in_form(request: Request, next: Annotated[str | None, Query(max_length=2000)] = None) -> Response:
    return _sign_in_page(request, next)


@router.post("/sign-in")
async def sign_in(
    request: Request,
    api_key: Annotated[str, Form(max_length=session.MAX_KEY_CHARS)],
    token: CsrfField = None,
    next: Annotated[str | None, Form(max_length=2000)] = None,
) -> Response:
    session.check_sign_in_token(request, token)
    key = api_key.strip()
    try:
        if not key:
            raise ApiError(401, "unauthorized", "enter an API key", "api_key")
        await session.principal_for_key(request, key)
    except ApiError as exc:
        if exc.status != 401:
            raise  # 429 after too many wrong keys: the error page says so
        return _sign_in_page(request, next, 401, "That API key is not valid (or was revoked).")
    done = _redirect(session.safe_next(next))
    session.set_session(done, request, key)
    done.delete_cookie(session.SIGN_IN_COOKIE, path="/console")
    return done


@router.post("/sign-out")
async def sign_out(request: Request, token: CsrfField = None) -> Response:
    session.check_csrf(request, token)
    response = _redirect("/console/sign-in")
    session.clear_session(response, request)
    return response


# Videos ------------------------------------------------------------------------------------


async def _videos_page(
    request: Request,
    jobs: VideoJobs,
    settings: Any,
    principal: Principal,
    status_code: int = 200,
    error: ApiError | None = None,
    **form: str,
) -> Response:
    views, has_more = await jobs.page(None, VIDEO_PAGE, "desc")
    # The form offers what ``GET /v1/models`` lists, read by that route's own function.
    served = await models_router.list_models(settings, principal)
    return page(
        request,
        "videos.html",
        status_code=status_code,
        videos=[v.to_video() for v in views],
        has_more=has_more,
        models=served.data,
        error=error,
        form=form,
        nav="videos",
    )


@router.get("/videos")
async def videos_page(request: Request, jobs: JobsDep, settings: SettingsDep, principal: ConsolePrincipal) -> Response:
    return await _videos_page(request, jobs, settings, principal)


@router.post("/videos")
async def create_video(request: Request, jobs: JobsDep, settings: SettingsDep, principal: ConsolePrincipal) -> Response:
    fields = await _form(request)
    session.check_csrf(request, fields.pop(session.CSRF_FIELD, None))
    # Empty optional inputs mean "the model's default", as an omitted JSON field does.
    body_fields = {k: v for k, v in fields.items() if k in CREATE_FIELDS and v != ""}
    try:
        body = VideoCreateRequest.model_validate(body_fields)
        view = await jobs.submit(body, None, request)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        param = ".".join(str(p) for p in first.get("loc", ())) or "body"
        error = ApiError(400, "invalid_request", f"{param}: {first.get('msg', 'invalid')}", param)
        return await _videos_page(request, jobs, settings, principal, 400, error, **fields)
    except ApiError as exc:
        if exc.status >= 500:
            raise
        return await _videos_page(request, jobs, settings, principal, exc.status, exc, **fields)
    return _redirect(f"/console/videos/{view.job_id}")


@router.get("/videos/{video_id}")
async def video_page(request: Request, video_id: str, jobs: JobsDep, settings: SettingsDep) -> Response:
    view = await jobs.get(video_id)
    return page(
        request,
        "video.html",
        video=view.to_video(),
        terminal=view.terminal,
        temporal_link=_temporal_link(settings, video_workflow_id(view.job_id)),
        nav="videos",
    )


@router.get("/videos/{video_id}/events")
async def video_events(
    video_id: str,
    jobs: JobsDep,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=64)] = None,
) -> StreamingResponse:
    """The API's own ``video.updated`` stream."""
    return await videos_router.video_events(video_id, jobs, last_event_id)


@router.get("/videos/{video_id}/content")
async def video_content(
    video_id: str,
    jobs: JobsDep,
    store: StoreDep,
    settings: SettingsDep,
    variant: Annotated[Literal["video", "thumbnail", "preview"], Query()] = "video",
) -> Response:
    """The API's own content route (``preview``: a running job's newest preview frame)."""
    return await videos_router.download_content(video_id, jobs, store, settings, variant)


@router.post("/videos/{video_id}/cancel")
async def cancel_video(request: Request, video_id: str, jobs: JobsDep, token: CsrfField = None) -> Response:
    session.check_csrf(request, token)
    await jobs.cancel(video_id)
    return _redirect(f"/console/videos/{video_id}")


@router.post("/videos/{video_id}/delete")
async def delete_video(request: Request, video_id: str, jobs: JobsDep, token: CsrfField = None) -> Response:
    session.check_csrf(request, token)
    await jobs.delete(video_id)
    return _redirect("/console/videos")


@router.get("/fleet")
async def fleet_page(
    request: Request, principal: ConsolePrincipal, client: ClientDep, settings: SettingsDep
) -> Response:
    """The fleet controller's latest decisions (pool-level figures, as ``/v1/capacity`` has)."""
    decisions = await fleet_decisions(client, settings.queue_prefix)
    return page(request, "fleet.html", decisions=decisions, nav="fleet")


# CI ----------------------------------------------------------------------------------------


@router.get("/repos")
async def repos_page(request: Request, principal: ConsolePrincipal, db: DbDep) -> Response:
    repos = await repos_router.get_repos(principal, db)
    return page(request, "repos.html", repos=repos.data, nav="ci")


@router.get("/runs")
async def runs_page(
    request: Request,
    principal: ConsolePrincipal,
    db: DbDep,
    repo: Annotated[str | None, Query(max_length=64)] = None,
    commit: Annotated[str | None, Query(max_length=64, pattern=r"^[0-9a-fA-F]{1,64}$")] = None,
    after: Annotated[str | None, Query(max_length=512)] = None,
) -> Response:
    listing = await runs_router.list_runs(principal, db, repo, None, RUN_PAGE, after)
    rows = [r for r in listing.data if commit is None or (r.commit_sha or "").startswith(commit.lower())]
    # The trigger (push, pull_request, dispatch) is a column of the same rows the listing read.
    triggers = {}
    for r in rows:
        record = await asyncio.to_thread(get_run_record, db, principal.tenant_id, r.id)
        triggers[r.id] = record.event if record is not None else ""
    return page(
        request,
        "runs.html",
        runs=rows,
        triggers=triggers,
        repo=repo,
        commit=commit,
        next_cursor=listing.next_cursor,
        nav="ci",
    )


def run_graph(run: RunOut) -> Graph:
    """The run's job graph. A matrix job is drawn as its combinations (it runs no steps and has
    no log of its own: its node would be an empty box beside them), and a job that needs it is
    drawn after each of them; one not expanded yet (waiting for what it needs) is drawn as itself."""
    expanded = {j.id: j.combinations for j in run.jobs if j.combinations}

    def drawn(needs: list[str]) -> list[str]:
        return [c for n in needs for c in expanded.get(n, [n])]

    return layout_graph([(j.id, j.name, j.status, drawn(j.needs)) for j in run.jobs if j.id not in expanded])


@router.get("/runs/{run}")
async def run_page(
    request: Request, run: str, principal: ConsolePrincipal, client: ClientDep, db: DbDep, explainer: QueueExplainerDep
) -> Response:
    out = await runs_router.get_run(run, principal, client, db, explainer)
    settings = request.app.state.settings
    artifacts = (await artifacts_router.list_artifacts(run, principal, client, db)).data
    return page(
        request,
        "run.html",
        run=out,
        artifacts=artifacts,
        graph=run_graph(out),
        final=out.status in FINAL_RUN_STATUSES,
        temporal_link=_temporal_link(settings, run_workflow_id(out.id)),
        nav="ci",
    )


def _run_snapshot(out: RunOut) -> dict[str, Any]:
    return {
        "status": out.status,
        "cancel_requested": out.cancel_requested,
        "jobs": [{"id": j.id, "status": j.status, "attempt": j.attempt} for j in out.jobs],
    }


@router.get("/runs/{run}/artifacts/{artifact_id}/zip")
async def run_artifact(
    run: str, artifact_id: int, principal: ConsolePrincipal, client: ClientDep, db: DbDep, store: StoreDep
) -> Response:
    """An artifact's zip, for the signed-in user (the API's download, by the console's session)."""
    return await artifacts_router.download_artifact(run, artifact_id, principal, client, db, store)


@router.get("/runs/{run}/events")
async def run_events(request: Request, run: str, principal: ConsolePrincipal, client: ClientDep, db: DbDep) -> Response:
    """``run.updated`` whenever the run's status or a job's status changes, from the read model
    (the server looks; the browser only listens); ends when the run does."""
    await load_run(db, client, principal, run)  # 404 before the stream opens

    async def stream() -> AsyncIterator[str]:
        yield "retry: 1000\n\n"
        last: str | None = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RUN_STREAM_MAX_SECONDS
        while loop.time() < deadline:
            state = await stored_run(db, principal, run)
            if state is not None:
                snapshot = _run_snapshot(RunOut.from_state(state))
                data = json.dumps(snapshot, separators=(",", ":"))
                if data != last:
                    last = data
                    yield f"event: run.updated\ndata: {data}\n\n"
                if snapshot["status"] in FINAL_RUN_STATUSES:
                    yield "event: end\ndata: {}\n\n"
                    return
            if await request.is_disconnected():
                return
            await asyncio.sleep(RUN_WATCH_SECONDS)

    return StreamingResponse(
        stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


@router.post("/runs/{run}/{action}")
async def act_on_run(
    request: Request, run: str, action: Literal["cancel", "rerun"], caller: RunCallerDep, token: CsrfField = None
) -> Response:
    """The run page's buttons: cancel the run, or re-run all of its jobs once it has ended."""
    session.check_csrf(request, token)
    act = runs_router.cancel if action == "cancel" else runs_router.rerun_run
    await act(run, caller.principal, caller.client, caller.db)
    return _redirect(f"/console/runs/{run}")


@router.post("/runs/{run}/jobs/{job}/retry")
async def retry_job(request: Request, run: str, job: str, caller: RunCallerDep, token: CsrfField = None) -> Response:
    session.check_csrf(request, token)
    await runs_router.retry(run, job, caller.principal, caller.client, caller.db)
    return _redirect(f"/console/runs/{run}")


@router.post("/runs/{run}/jobs/{job}/{decision}")
async def decide_job(
    request: Request,
    run: str,
    job: str,
    decision: Literal["approve", "reject"],
    caller: RunCallerDep,
    token: CsrfField = None,
    comment: Annotated[str | None, Form(max_length=1000)] = None,
) -> Response:
    session.check_csrf(request, token)
    body = runs_router.DecisionIn(comment=comment or None)
    decide = runs_router.approve if decision == "approve" else runs_router.reject
    await decide(run, job, caller.principal, caller.client, caller.db, body)
    return _redirect(f"/console/runs/{run}")


@router.get("/runs/{run}/jobs/{job}")
async def job_page(request: Request, ref: ConsoleAttemptDep, explainer: QueueExplainerDep) -> Response:
    job, attempt = ref.job, ref.attempt
    check_job_id(job)
    out = await runs_router.get_run(ref.run, ref.principal, ref.client, ref.db, explainer)
    found = next((j for j in out.jobs if j.id == job), None)
    if found is None:
        raise ApiError(404, "not_found", "job not found")
    chosen = next((a for a in found.attempts if a.attempt == (attempt or found.attempt)), None)
    if attempt is not None and chosen is None:
        raise ApiError(404, "not_found", "attempt not found", "attempt")
    summary: str | None = None
    if chosen is not None:
        try:
            answer = await runs_router.get_step_summary(replace(ref, attempt=chosen.attempt))
            summary = bytes(answer.body).decode("utf-8", errors="replace")
        except ApiError as exc:
            if exc.status != 404:
                raise
    annotations = [(step.name, a) for step in (chosen.steps if chosen else []) for a in step.annotations]
    return page(
        request,
        "job.html",
        run=out,
        job=found,
        chosen=chosen,
        attempt=attempt,
        summary=summary,
        annotations=annotations,
        nav="ci",
    )


@router.get("/runs/{run}/jobs/{job}/logs/stream")
async def job_log_stream(
    request: Request,
    ref: ConsoleAttemptDep,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=32)] = None,
) -> Response:
    """The API's own log stream: ``log`` events by sequence number; a reconnecting
    ``EventSource`` sends ``Last-Event-ID`` and continues after it."""
    return await logs_router.stream_logs(request, ref, 0, last_event_id)


__all__ = ["router", "run_graph"]
