"""``leasehold video create|list|get|cancel|download``: video jobs through the API.

``create --watch`` (and ``get --watch``) follow the job's server-sent events
(``/v1/videos/{id}/events``) with a progress bar, the API's ETA and the queue position, then
download the MP4. The exit code says how the job ended (`cli.remote.Exit`).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from cli.remote import (
    Api,
    CliFailure,
    Exit,
    Reconnect,
    add_api_command,
    answer,
    api_from,
    call_and_answer,
    command,
    failure_of,
    fields,
    list_page,
    note,
    print_json,
    printable,
    seconds_text,
    stream_events,
)

TERMINAL = {"completed", "failed", "cancelled", "expired"}
_EXIT_OF = {"completed": Exit.OK, "failed": Exit.FAILED, "cancelled": Exit.CANCELLED, "expired": Exit.NOT_FOUND}
# The API answers a stream for at most an hour and the server sends an event on every change;
# a read that waits longer than this means the connection is dead.
STREAM_READ_TIMEOUT = 120.0
_EXTENSIONS = {"video/mp4": ".mp4", "image/webp": ".webp", "image/jpeg": ".jpg", "image/png": ".png"}
_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_DOWNLOAD_CHUNK = 256 * 1024


def _video_id(text: str) -> str:
    # Ids go into URL paths: refuse anything that could change the path ("..", "/", "?").
    if not _ID.match(text) or text in (".", ".."):
        raise argparse.ArgumentTypeError(f"not a video id: {text!r}")
    return text


# Watching ----------------------------------------------------------------------------------------


class _Display:
    """How a watched job is shown: a rich bar on a terminal, a line per change otherwise,
    nothing with ``--json`` (stdout is the result; stderr keeps the person's lines)."""

    def __init__(self, video_id: str, quiet: bool) -> None:
        self.video_id = video_id
        self.quiet = quiet
        self.progress: Any = None
        self.task: Any = None
        self.last_line = ""

    def __enter__(self) -> _Display:
        if not self.quiet and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

            self.progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[detail]}"),
                console=Console(stderr=True),
                transient=False,
            )
            self.progress.start()
            self.task = self.progress.add_task(self.video_id, total=100, detail="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def show(self, video: dict[str, Any]) -> None:
        status, progress, detail = str(video.get("status")), int(video.get("progress") or 0), _detail(video)
        if self.progress is not None:
            self.progress.update(self.task, completed=progress, detail=" · ".join([status, *detail]))
            return
        if self.quiet:
            return
        line = " ".join([self.video_id, status, f"{progress}%", *detail])
        if line != self.last_line:
            note(line)
            self.last_line = line

    def say(self, text: str) -> None:
        if self.progress is not None:
            self.progress.console.print(printable(text), markup=False, highlight=False)
        else:
            note(text)


def _detail(video: dict[str, Any]) -> list[str]:
    """What a person wants to know besides status and progress: queue place, attempt, ETA."""
    status = str(video.get("status"))
    parts = []
    queue = video.get("queue")
    if status == "queued" and isinstance(queue, dict):
        parts.append(f"position {queue.get('position')} ({queue.get('ahead')} ahead)")
    if int(video.get("attempt") or 0) > 1:
        parts.append(f"attempt {video['attempt']}")
    if status not in TERMINAL:
        eta = video.get("eta_seconds")
        parts.append(f"ETA {seconds_text(eta)}" if eta is not None else f"no ETA: {video.get('eta_reason') or '-'}")
    return parts


def watch(api: Api, video_id: str, display: _Display, reconnect_within: float = 60.0) -> dict[str, Any]:
    """Follow the job's event stream until it ends; reconnects (with ``Last-Event-ID``) after a
    dropped connection, for at most ``reconnect_within`` seconds of failing in a row."""
    last_id: str | None = None
    video: dict[str, Any] | None = None
    retry = Reconnect(within=reconnect_within)
    for _ in range(100_000):
        try:
            for event in stream_events(
                api, f"/v1/videos/{video_id}/events", retry, display.say, STREAM_READ_TIMEOUT, last_id
            ):
                if event.event == "error":
                    data = event.data if isinstance(event.data, dict) else {}
                    if data.get("code") == "not_found":
                        raise CliFailure(f"video {video_id}: {data.get('message', 'gone')}", Exit.NOT_FOUND)
                    raise CliFailure(str(data.get("message", "the stream failed")), Exit.UNREACHABLE)
                if event.event != "video.updated" or not isinstance(event.data, dict):
                    continue
                video = event.data
                last_id = event.id or last_id
                display.show(video)
                if video.get("status") in TERMINAL:
                    return video
        except CliFailure as exc:
            if exc.code != Exit.UNREACHABLE:
                raise
            retry.wait(exc, display.say)
            continue
        if retry.waited:
            continue
        # The stream ended (its hour is up) before the job did: pick it up again.
        time.sleep(0.2)
    raise CliFailure(f"video {video_id}: gave up following its events", Exit.UNREACHABLE)


def _finish(api: Api, args: argparse.Namespace, video_id: str) -> int:
    """Watch, download when completed, and exit with how the job ended."""
    with _Display(video_id, quiet=args.json) as display:
        video = watch(api, video_id, display)
    status = str(video.get("status"))
    if status == "completed" and not args.no_download:
        target, size = download(api, video_id, "video", args.output)
        if not args.json:
            note(f"saved {target} ({size} bytes)")
    elif status != "completed":
        error = video.get("error") or {}
        reason = f": {error.get('code')}: {error.get('message')}" if error else ""
        note(f"video {video_id} {status}{reason}")
    if args.json:
        print_json(video)
    else:
        _show(video)
    return int(_EXIT_OF.get(status, Exit.FAILED))


# Downloads -------------------------------------------------------------------------------------


def _target(output: Path | None, video_id: str, content_type: str) -> Path:
    """Where content goes: ``-o FILE``, or ``ID.<ext>`` (in ``-o DIR`` or here); the extension
    comes from the media type, never from a name the server chose."""
    name = f"{video_id}{_EXTENSIONS.get(content_type.split(';')[0].strip().lower(), '.bin')}"
    if output is None:
        return Path(name)
    if output.is_dir():
        return output / name
    return output


def download(api: Api, video_id: str, variant: str, output: Path | None) -> tuple[Path, int]:
    """Stream the job's content to a file (written whole or not at all); its path and size.

    A remote store answers with a redirect to a signed URL: that URL is fetched without the
    API key, which is for the API alone.
    """
    import httpx

    try:
        with api.http.stream("GET", f"/v1/videos/{video_id}/content", params={"variant": variant}) as response:
            if response.is_redirect:
                url = response.url.join(response.headers.get("location", ""))
                if url.scheme not in ("http", "https"):
                    raise CliFailure(f"the API redirected the download to a {url.scheme}: URL", Exit.UNREACHABLE)
                with (
                    httpx.Client(timeout=api.timeout, follow_redirects=False) as plain,
                    plain.stream("GET", url) as signed,
                ):
                    if signed.status_code >= 400:
                        raise CliFailure(f"the signed download answered {signed.status_code}", Exit.NOT_FOUND)
                    target = _target(output, video_id, signed.headers.get("content-type", ""))
                    return target, _save(signed, target)
            if response.status_code >= 400:
                response.read()
                raise failure_of(response)
            target = _target(output, video_id, response.headers.get("content-type", ""))
            return target, _save(response, target)
    except httpx.HTTPError as exc:
        raise api.unreachable(exc) from None


def _save(response: Any, target: Path) -> int:
    expected = response.headers.get("content-length")
    part = target.with_name(f".{target.name}.{os.getpid()}.part")
    written = 0
    try:
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as exc:
        raise CliFailure(f"cannot write {target}: {exc.strerror or exc}", Exit.USAGE) from None
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in response.iter_bytes(_DOWNLOAD_CHUNK):
                out.write(chunk)
                written += len(chunk)
        if expected is not None and expected.isdigit() and int(expected) != written:
            raise CliFailure(f"download cut short: {written} of {expected} bytes", Exit.UNREACHABLE)
        os.replace(part, target)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return written


# Commands --------------------------------------------------------------------------------------


def _show(video: dict[str, Any]) -> None:
    error = video.get("error") or {}
    queue = video.get("queue") or {}
    fields(
        [
            ("id", video.get("id")),
            ("status", video.get("status")),
            ("progress", f"{video.get('progress', 0)}%"),
            ("model", video.get("model")),
            ("size", video.get("size")),
            ("seconds", video.get("seconds")),
            ("prompt", video.get("prompt")),
            ("attempt", video.get("attempt") or None),
            ("eta", seconds_text(video.get("eta_seconds")) if video.get("eta_seconds") is not None else None),
            ("eta_reason", video.get("eta_reason")),
            ("queue", f"position {queue.get('position')}, {queue.get('ahead')} ahead" if queue else None),
            ("queue_reason", queue.get("reason") if queue else None),
            ("error", f"{error.get('code')}: {error.get('message')}" if error else None),
        ]
    )


@command
def cmd_create(args: argparse.Namespace) -> int:
    api = api_from(args)
    body: dict[str, Any] = {"prompt": args.prompt}
    for name in ("model", "size", "seconds", "seed", "steps"):
        value = getattr(args, name)
        if value is not None:
            body[name] = str(value) if name == "seconds" else value
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else {}
    video = api.call("POST", "/v1/videos", json=body, headers=headers)
    if not args.watch:
        if args.json:
            print_json(video)
        else:
            _show(video)
        return int(Exit.OK)
    if not args.json:
        note(f"created {video['id']}")
    return _finish(api, args, str(video["id"]))


@command
def cmd_get(args: argparse.Namespace) -> int:
    api = api_from(args)
    if args.watch:
        return _finish(api, args, args.video_id)
    video = api.call("GET", f"/v1/videos/{args.video_id}")
    return answer(args, video, _show)


@command
def cmd_list(args: argparse.Namespace) -> int:
    api = api_from(args)
    params: dict[str, Any] = {"limit": args.limit, "order": args.order}
    if args.after:
        params["after"] = args.after
    columns = ["id", "status", "progress", "eta", "model", "size", "seconds", "prompt"]
    return list_page(args, api, "/v1/videos", params, columns, _row, _more)


def _row(v: dict[str, Any]) -> list[str]:
    return [
        str(v.get("id")),
        str(v.get("status")),
        f"{v.get('progress', 0)}%",
        seconds_text(v.get("eta_seconds")),
        str(v.get("model")),
        str(v.get("size")),
        str(v.get("seconds")),
        _short(str(v.get("prompt", ""))),
    ]


def _more(page: dict[str, Any]) -> str:
    return f"leasehold video list --after {page.get('last_id')}"


def _short(text: str, limit: int = 48) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@command
def cmd_cancel(args: argparse.Namespace) -> int:
    return call_and_answer(args, "POST", f"/v1/videos/{args.video_id}/cancel", _show)


@command
def cmd_download(args: argparse.Namespace) -> int:
    api = api_from(args)
    target, size = download(api, args.video_id, args.variant, args.output)
    if args.json:
        print_json({"id": args.video_id, "variant": args.variant, "path": str(target), "bytes": size})
    else:
        note(f"saved {target} ({size} bytes)")
    return int(Exit.OK)


def add_commands(sub: Any) -> None:
    """Add the ``video`` subcommands to the top-level parser's subparsers."""
    video = sub.add_parser("video", help="video jobs (through the API)")
    video_sub = video.add_subparsers(dest="video_command", required=True)
    video_id = ("video_id", _video_id)
    add_api_command(video_sub, "create", cmd_create, "submit a video job", options=_create_options)
    add_api_command(video_sub, "list", cmd_list, "your video jobs, newest first", options=_list_options)
    add_api_command(video_sub, "get", cmd_get, "one video job", video_id, options=_watch_arguments)
    add_api_command(video_sub, "cancel", cmd_cancel, "cancel a queued or running job", video_id)
    download_help = "save a completed job's video or thumbnail"
    add_api_command(video_sub, "download", cmd_download, download_help, video_id, options=_download_options)


def _create_options(create: argparse.ArgumentParser) -> None:
    create.add_argument("--prompt", required=True)
    create.add_argument("--model", default=None, help="default: the API's default model")
    create.add_argument("--size", default=None, help="WIDTHxHEIGHT, e.g. 720x1280")
    create.add_argument("--seconds", type=int, default=None)
    create.add_argument("--seed", type=int, default=None, help="same seed, same video")
    create.add_argument("--steps", type=int, default=None, help="sampler steps (default: the model's)")
    create.add_argument("--idempotency-key", default=None, help="the same key submits the same job once")
    _watch_arguments(create)


def _list_options(ls: argparse.ArgumentParser) -> None:
    ls.add_argument("--limit", type=int, default=20, help="at most this many (1-100)")
    ls.add_argument("--after", default=None, help="the previous page's last id")
    ls.add_argument("--order", choices=["asc", "desc"], default="desc")


def _download_options(download_cmd: argparse.ArgumentParser) -> None:
    download_cmd.add_argument("--variant", choices=["video", "thumbnail"], default="video")
    download_cmd.add_argument("-o", "--output", type=Path, default=None, help="file or directory (default: ./ID.ext)")


def _watch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--watch", action="store_true", help="follow progress until the job ends, then download")
    parser.add_argument("-o", "--output", type=Path, default=None, help="--watch saves the MP4 here (./ID.mp4)")
    parser.add_argument("--no-download", action="store_true", help="with --watch: do not save the MP4")
