"""``leasehold runs list|get|cancel|retry|rerun|logs|artifacts``: CI runs through the API.

``runs logs RUN JOB --follow`` tails the job's live log (``/logs/stream``, server-sent events
whose id is the chunk's sequence number). After a dropped connection it reconnects with
``Last-Event-ID`` set to the last sequence number it printed, on the same attempt, so every
chunk is printed once: none twice, none skipped. It exits with how the job ended.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import datetime
from typing import Any

from cli.artifacts import add_options as add_artifact_options
from cli.artifacts import cmd_artifacts
from cli.remote import (
    Api,
    CliFailure,
    Exit,
    Reconnect,
    add_api_command,
    api_from,
    call_and_answer,
    command,
    fields,
    list_page,
    note,
    print_json,
    stream_events,
    table,
)

# How an attempt's log ended (its ``end`` event) -> the exit code of ``logs --follow``.
_EXIT_OF = {
    "success": Exit.OK,
    "skipped": Exit.OK,
    "failure": Exit.FAILED,
    "timed_out": Exit.FAILED,
    "error": Exit.FAILED,
    "cancelled": Exit.CANCELLED,
}
RETRYABLE = {"failure", "cancelled"}
# The server sends a keep-alive every 15 s; a read silent for longer means a dead connection.
STREAM_READ_TIMEOUT = 60.0
# A lost attempt's job gets a new attempt from the engine; wait this long for it to show.
NEXT_ATTEMPT_WAIT_SECONDS = 600.0
_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
# What a job's log may send to a person's terminal: colours (SGR), not other escape sequences
# (titles, hyperlinks, clipboard writes, cursor moves) nor other control characters.
_SGR = r"\x1b\[[0-9;]*m"
_UNSAFE = re.compile(
    rf"{_SGR}|(\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f])"
)


def for_terminal(text: str) -> str:
    """A job's text with its colours kept and every other escape or control character dropped."""
    return _UNSAFE.sub(lambda m: m.group(0) if m.group(1) is None else "", text)


def _path_id(text: str) -> str:
    # Ids go into URL paths: refuse anything that could change the path ("..", "/", "?").
    if not _ID.match(text) or text in (".", ".."):
        raise argparse.ArgumentTypeError(f"not an id: {text!r}")
    return text


def _when(value: Any, minutes: bool = False) -> str:
    if not value:
        return "-"
    try:
        shape = "%Y-%m-%d %H:%M" if minutes else "%Y-%m-%d %H:%M:%S"
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).strftime(shape)
    except ValueError:
        return str(value)


def _duration(start: Any, end: Any) -> str:
    try:
        began = datetime.fromisoformat(str(start).replace("Z", "+00:00"))
        ended = datetime.fromisoformat(str(end).replace("Z", "+00:00"))
    except ValueError:
        return "-"
    return f"{(ended - began).total_seconds():.1f}s"


# list, get, cancel, retry ----------------------------------------------------------------------


def _short_ref(ref: Any) -> str:
    # A branch as people name it ("main"); tags and pull-request refs stay whole.
    return str(ref).removeprefix("refs/heads/") if ref else "-"


def _repositories(api: Api) -> dict[str, str]:
    """The caller's repositories, id -> full name (one request: the list names each run's)."""
    return {str(r.get("id")): str(r.get("name")) for r in api.call("GET", "/v1/repos").get("data", [])}


@command
def cmd_list(args: argparse.Namespace) -> int:
    api = api_from(args)
    by_name = "/" in (args.repo or "")
    names = _repositories(api) if by_name or not args.json else {}
    params: dict[str, Any] = {"limit": args.limit}
    for name in ("repo", "status", "after"):
        if getattr(args, name):
            params[name] = getattr(args, name)
    if by_name:
        # A full name ("acme/widgets"): the API filters by id.
        ids = [rid for rid, full in names.items() if full == args.repo]
        if not ids:
            raise CliFailure(f"no repository named {args.repo} for this key", Exit.NOT_FOUND)
        params["repo"] = ids[0]

    def row(r: dict[str, Any]) -> list[str]:
        return [
            str(r.get("id")),
            str(r.get("status")),
            names.get(str(r.get("repo_id")), str(r.get("repo_id"))),
            str(r.get("workflow_path")).removeprefix(".github/workflows/"),
            "-" if r.get("run_number") is None else str(r.get("run_number")),
            _short_ref(r.get("ref")),
            str(r.get("commit_sha") or "")[:7],
            _when(r.get("created_at"), minutes=True),
            _duration(r.get("created_at"), r.get("closed_at")) if r.get("closed_at") else "-",
        ]

    # "#": the run's number among its workflow's runs (``github.run_number``), beside the workflow.
    columns = ["id", "status", "repo", "workflow", "#", "ref", "commit", "created", "took"]
    return list_page(
        args,
        api,
        "/v1/runs",
        params,
        columns,
        row,
        lambda page: f"leasehold runs list --after {page.get('next_cursor')}",
        # The run id is what a person copies into `runs get`/`runs logs`: never cut it.
        whole=("id", "status", "#", "commit", "created", "took"),
    )


def _show_run(run: dict[str, Any]) -> None:
    fields(
        [
            ("id", run.get("id")),
            ("status", run.get("status")),
            ("repo", run.get("repo_full_name") or run.get("repo_id")),
            ("workflow", run.get("workflow_name") or run.get("workflow_path")),
            ("number", None if run.get("run_number") is None else f"#{run.get('run_number')}"),
            ("ref", run.get("ref")),
            ("commit", run.get("commit_sha")),
            ("event", run.get("event")),
            ("created", _when(run.get("created_at"))),
            ("took", _duration(run.get("started_at"), run.get("finished_at")) if run.get("finished_at") else None),
            ("retries", run.get("retries") or None),
            ("error", run.get("error")),
            ("notice", run.get("notice")),
        ]
    )
    rows = [
        [
            str(j.get("id")),
            str(j.get("status")),
            str(j.get("attempt", 0)),
            "-" if j.get("exit_code") is None else str(j.get("exit_code")),
            _duration(j.get("started_at"), j.get("finished_at")) if j.get("finished_at") else "-",
            ",".join(j.get("needs") or []) or "-",
            str(j.get("error") or ""),
        ]
        for j in run.get("jobs", [])
    ]
    table("jobs", ["job", "status", "attempt", "exit", "took", "needs", "error"], rows)


@command
def cmd_get(args: argparse.Namespace) -> int:
    return call_and_answer(args, "GET", f"/v1/runs/{args.run}", _show_run)


@command
def cmd_cancel(args: argparse.Namespace) -> int:
    return call_and_answer(args, "POST", f"/v1/runs/{args.run}/cancel", _show_run)


@command
def cmd_retry(args: argparse.Namespace) -> int:
    """Retry one job, or (without JOB) every failed or cancelled job not already reset by the
    retry of a job it needs."""
    api = api_from(args)
    if args.job is not None:
        chosen = [args.job]
    else:
        run = api.call("GET", f"/v1/runs/{args.run}")
        chosen = [str(j["id"]) for j in run.get("jobs", []) if j.get("status") in RETRYABLE]
        if not chosen:
            raise CliFailure(f"run {args.run} has no failed or cancelled job to retry", Exit.REFUSED)
    answers: list[dict[str, Any]] = []
    reset: set[str] = set()
    for job in chosen:
        if job in reset:
            continue
        answer = api.call("POST", f"/v1/runs/{args.run}/jobs/{job}/retry")
        answers.append(answer)
        reset.update(answer.get("reset_jobs") or [job])
    if args.json:
        print_json({"object": "list", "data": answers})
    else:
        for answer in answers:
            again = ", ".join(answer.get("reset_jobs") or [])
            note(f"retrying {answer.get('job_id')} (round {answer.get('round')}); runs again: {again}")
    return int(Exit.OK)


# logs ------------------------------------------------------------------------------------------


class _LogOut:
    """Where a job's log goes: its text on stdout, or one JSON line per event with ``--json``."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.terminal = sys.stdout.isatty()

    def chunk(self, seq: int, attempt: int, text: str) -> None:
        if self.as_json:
            print_json({"event": "log", "seq": seq, "attempt": attempt, "text": text})
            return
        sys.stdout.write(for_terminal(text) if self.terminal else text)
        sys.stdout.flush()

    def gap(self, seq: int, attempt: int) -> None:
        if self.as_json:
            print_json({"event": "gap", "seq": seq, "attempt": attempt})
        else:
            note(f"[chunk {seq} of attempt {attempt} was lost: output missing here]")

    def end(self, data: dict[str, Any]) -> None:
        if self.as_json:
            print_json({"event": "end", **data})


def _page_logs(api: Api, args: argparse.Namespace, out: _LogOut) -> int:
    """The stored log of one attempt, page by page."""
    seq = 0
    params: dict[str, Any] = {}
    if args.attempt is not None:
        params["attempt"] = args.attempt
    for _ in range(100_000):
        page = api.call("GET", f"/v1/runs/{args.run}/jobs/{args.job}/logs", params={**params, "from_seq": seq})
        attempt = int(page.get("attempt") or 0)
        texts = {int(c["seq"]): str(c["text"]) for c in page.get("chunks", [])}
        for number in range(seq, int(page.get("next_seq", seq))):
            if number in texts:
                out.chunk(number, attempt, texts[number])
            else:
                out.gap(number, attempt)
        seq = int(page.get("next_seq", seq))
        if not page.get("has_more"):
            if out.as_json:
                out.end({"attempt": attempt, "status": page.get("status"), "next_seq": seq, "ended": page.get("ended")})
            return int(Exit.OK)
    raise CliFailure("the log did not end", Exit.UNREACHABLE)


def follow_logs(api: Api, run: str, job: str, attempt: int | None, out: _LogOut, reconnect_within: float) -> int:
    """Tail the job's log until its attempt ends; resume by sequence number after a drop."""
    last_seq: int | None = None
    retry = Reconnect(within=reconnect_within)
    for _ in range(100_000):
        params: dict[str, Any] = {}
        if attempt is not None:
            params["attempt"] = attempt
        ended: dict[str, Any] | None = None
        path = f"/v1/runs/{run}/jobs/{job}/logs/stream"
        last_id = str(last_seq) if last_seq is not None else None
        for event in stream_events(api, path, retry, note, STREAM_READ_TIMEOUT, last_id, params):
            data = event.data if isinstance(event.data, dict) else {}
            if event.event in ("log", "gap"):
                seq, event_attempt = int(data["seq"]), int(data["attempt"])
                # From here on this attempt only: a reconnect must not switch to a newer one.
                attempt = event_attempt if attempt is None else attempt
                if last_seq is not None and seq <= last_seq:
                    continue  # already printed before the drop
                if event.event == "log":
                    out.chunk(seq, event_attempt, str(data.get("text", "")))
                else:
                    out.gap(seq, event_attempt)
                last_seq = seq
            elif event.event == "waiting":
                # Not started yet: say what it waits for (a worker, a slot, an approval).
                note(f"{job}: {data.get('message') or data.get('status')}")
            elif event.event == "end":
                ended = data
                break
        if retry.waited:
            continue
        if ended is None:
            # The stream's hour was up before the log ended: continue where it stopped.
            time.sleep(0.2)
            continue
        status = str(ended.get("status"))
        out.end(ended)
        if status == "lost":
            # The worker went away; the engine starts a new attempt: follow that one.
            lost = int(ended.get("attempt") or 0)
            note(f"attempt {lost} was lost with its worker; waiting for the next attempt")
            attempt = _next_attempt(api, run, job, lost)
            if attempt is None:
                return int(Exit.FAILED)
            last_seq = None
            retry.ok()
            continue
        if status == "skipped" or (ended.get("attempt") == 0 and status not in _EXIT_OF):
            note(f"job {job} ended {status} without running")
        return int(_EXIT_OF.get(status, Exit.FAILED))
    raise CliFailure("the log did not end", Exit.UNREACHABLE)


def _next_attempt(api: Api, run: str, job: str, after: int) -> int | None:
    """The job's next attempt once the run shows it; None when the job ends without one."""
    deadline = time.monotonic() + NEXT_ATTEMPT_WAIT_SECONDS
    while time.monotonic() < deadline:
        state = api.call("GET", f"/v1/runs/{run}")
        found = next((j for j in state.get("jobs", []) if j.get("id") == job), None)
        if found is None:
            raise CliFailure(f"job {job} not found in run {run}", Exit.NOT_FOUND)
        newer = [int(a["attempt"]) for a in found.get("attempts", []) if int(a.get("attempt", 0)) > after]
        if newer:
            return min(newer)
        if found.get("status") in ("success", "failure", "cancelled", "skipped"):
            return None
        time.sleep(1.0)
    raise CliFailure(f"no new attempt of {job} after {NEXT_ATTEMPT_WAIT_SECONDS:.0f}s", Exit.UNREACHABLE)


def _combinations(api: Api, run: str, job: str) -> list[tuple[str, str]]:
    """(id, name) of each combination when ``job`` is a matrix job, else nothing."""
    jobs = {j.get("id"): j for j in api.call("GET", f"/v1/runs/{run}").get("jobs", [])}
    combinations = (jobs.get(job) or {}).get("combinations") or []
    return [(str(c), str((jobs.get(c) or {}).get("name") or c)) for c in combinations]


@command
def cmd_logs(args: argparse.Namespace) -> int:
    api = api_from(args)
    out = _LogOut(args.json)
    combinations = _combinations(api, args.run, args.job)
    if combinations and args.follow:
        listed = ", ".join(f"{cid} ({name})" for cid, name in combinations)
        raise CliFailure(f"{args.job} is a matrix job; follow one of its combinations: {listed}", Exit.USAGE)
    if not combinations:
        if not args.follow:
            return _page_logs(api, args, out)
        return follow_logs(api, args.run, args.job, args.attempt, out, args.reconnect_for)
    # A matrix job has no log of its own: each combination's, in order, under its name.
    for cid, name in combinations:
        note(f"== {name} ({cid})")
        _page_logs(api, argparse.Namespace(**{**vars(args), "job": cid}), out)
    return int(Exit.OK)


@command
def cmd_rerun(args: argparse.Namespace) -> int:
    """Re-run every job of a finished run, successful ones included."""
    answer = api_from(args).call("POST", f"/v1/runs/{args.run}/rerun")
    if args.json:
        print_json(answer)
    else:
        again = ", ".join(answer.get("reset_jobs") or [])
        note(f"re-running {answer.get('run_id')} as attempt {answer.get('run_attempt')}; runs again: {again}")
    return int(Exit.OK)


def add_commands(sub: Any) -> None:
    """Add the ``runs`` subcommands to the top-level parser's subparsers."""
    runs = sub.add_parser("runs", help="CI runs and their logs (through the API)")
    runs_sub = runs.add_subparsers(dest="runs_command", required=True)
    run, job = ("run", _path_id), ("job", _path_id)
    add_api_command(runs_sub, "list", cmd_list, "your runs, newest first", options=_list_options)
    add_api_command(runs_sub, "get", cmd_get, "a run and its jobs", run)
    add_api_command(runs_sub, "cancel", cmd_cancel, "cancel a run", run)
    retry_help = "re-run a failed or cancelled job (default: each of them)"
    add_api_command(runs_sub, "retry", cmd_retry, retry_help, run, options=_retry_options)
    add_api_command(runs_sub, "rerun", cmd_rerun, "re-run every job of a finished run, successful ones too", run)
    add_api_command(runs_sub, "logs", cmd_logs, "a job's log; --follow tails it live", run, job, options=_logs_options)
    artifacts_help = "a run's artifacts; --download NAME writes one's zip"
    add_api_command(runs_sub, "artifacts", cmd_artifacts, artifacts_help, run, options=add_artifact_options)


def _list_options(ls: argparse.ArgumentParser) -> None:
    ls.add_argument("--repo", default=None, help="only this repository's runs (its id or full name)")
    ls.add_argument("--status", default=None, help="queued, in_progress, success, failure or cancelled")
    ls.add_argument("--limit", type=int, default=20, help="at most this many (1-100)")
    ls.add_argument("--after", default=None, help="the previous page's next_cursor")


def _retry_options(retry: argparse.ArgumentParser) -> None:
    retry.add_argument("job", type=_path_id, nargs="?", default=None)


def _logs_options(logs: argparse.ArgumentParser) -> None:
    logs.add_argument("--attempt", type=int, default=None, help="default: the job's current attempt")
    logs.add_argument("-f", "--follow", action="store_true", help="follow the live log until the job ends")
    logs.add_argument(
        "--reconnect-for",
        type=float,
        default=60.0,
        help="with --follow: give up after this many seconds of failed reconnects (default 60)",
    )
