"""What the people's commands (``leasehold video``, ``leasehold runs``) share: the API over HTTP.

They talk to the API only (``--api-url``/``$LEASEHOLD_API_URL`` with ``--api-key``/
``$LEASEHOLD_API_KEY``), never to the database or Temporal, so a person needs nothing but a
key. Every way a call can go wrong ends as one line on stderr and an exit code that says what
happened (`Exit`); the API's own message is shown with the field it names, never a traceback.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx


class Exit(IntEnum):
    """Exit codes of the people's commands (docs/cli.md lists them)."""

    OK = 0
    # The job the command waited for (a video, a CI job or run) failed.
    FAILED = 1
    # Bad arguments, or the API refused the request as invalid (400, 413, 415, 422).
    USAGE = 2
    # No such video, run, job or repository for this key (404), or its content expired (410).
    NOT_FOUND = 3
    # The key is missing, unknown or revoked (401), or not allowed to do this (403).
    AUTH = 4
    # The job the command waited for was cancelled.
    CANCELLED = 5
    # The API did not answer, or answered that it (or the engine behind it) is unavailable (5xx).
    UNREACHABLE = 6
    # The API refused the action in the job's present state (409), or asked to slow down (429).
    REFUSED = 7
    INTERRUPTED = 130


class CliFailure(Exception):
    """Why a command stops: printed as one line, exits with ``code``."""

    def __init__(self, message: str, code: Exit) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


_STATUS_EXIT = {
    400: Exit.USAGE,
    401: Exit.AUTH,
    403: Exit.AUTH,
    404: Exit.NOT_FOUND,
    410: Exit.NOT_FOUND,
    409: Exit.REFUSED,
    413: Exit.USAGE,
    415: Exit.USAGE,
    422: Exit.USAGE,
    429: Exit.REFUSED,
}


def failure_of(response: httpx.Response) -> CliFailure:
    """The API's error answer as one line naming the field (``{"error": {"message", "param"}}``)."""
    code = _STATUS_EXIT.get(response.status_code, Exit.UNREACHABLE if response.status_code >= 500 else Exit.USAGE)
    message = f"the API answered {response.status_code}"
    try:
        error = response.json()["error"]
        text = str(error["message"])
        param = error.get("param")
        # The API's message usually names the field already; say it once either way.
        message = f"{param}: {text}" if param and not text.startswith(str(param)) else text
    except (ValueError, KeyError, TypeError):
        pass
    # Control characters from a server could rewrite the terminal; show them escaped.
    return CliFailure(printable(message), code)


def printable(text: str) -> str:
    """``text`` with every non-printable character (escape sequences, newlines) shown escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


@dataclass
class Api:
    """The API at ``base_url`` as the holder of ``key`` sees it."""

    base_url: str
    key: str
    timeout: float = 30.0

    def __post_init__(self) -> None:
        import httpx

        self.http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {self.key}", "User-Agent": "leasehold-cli"},
            timeout=self.timeout,
            # A redirect (a signed content URL) is followed by hand, without the key.
            follow_redirects=False,
        )

    def send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request; an error answer or no answer becomes a `CliFailure`."""
        import httpx

        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise self.unreachable(exc) from None
        if response.status_code >= 400:
            raise failure_of(response)
        return response

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """One request whose answer is JSON."""
        response = self.send(method, path, **kwargs)
        try:
            return response.json()
        except ValueError:
            raise CliFailure(f"the API answered {method} {path} with something not JSON", Exit.UNREACHABLE) from None

    def unreachable(self, exc: Exception) -> CliFailure:
        reason = type(exc).__name__ if not str(exc) else f"{type(exc).__name__}: {exc}"
        return CliFailure(f"the API at {self.base_url} did not answer ({printable(reason)})", Exit.UNREACHABLE)

    def close(self) -> None:
        self.http.close()


def api_from(args: argparse.Namespace) -> Api:
    """The API the command talks to: flags first, then ``$LEASEHOLD_API_URL``/``$LEASEHOLD_API_KEY``."""
    key = args.api_key or os.environ.get("LEASEHOLD_API_KEY")
    if not key:
        raise CliFailure("an API key is needed: --api-key or LEASEHOLD_API_KEY", Exit.AUTH)
    url = (args.api_url or os.environ.get("LEASEHOLD_API_URL") or "http://127.0.0.1:8000").rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise CliFailure(f"LEASEHOLD_API_URL must be an http:// or https:// URL, got {url!r}", Exit.USAGE)
    return Api(url, key)


def add_api_arguments(parser: argparse.ArgumentParser) -> None:
    """``--api-url``, ``--api-key`` and ``--json``, on every people's command."""
    parser.add_argument("--api-url", default=None, help="default: $LEASEHOLD_API_URL or http://127.0.0.1:8000")
    parser.add_argument("--api-key", default=None, help="default: $LEASEHOLD_API_KEY")
    parser.add_argument("--json", action="store_true", help="machine-readable output on stdout, nothing else there")


def add_api_command(
    sub: Any,
    name: str,
    func: Callable[[argparse.Namespace], int],
    help: str,
    *ids: tuple[str, Callable[[str], str]],
    options: Callable[[argparse.ArgumentParser], None] | None = None,
) -> None:
    """People's subcommand ``name`` of ``sub`` running ``func``: the positional ``ids`` (name,
    type), then what ``options`` adds, then `add_api_arguments`."""
    parser = sub.add_parser(name, help=help)
    for id_name, kind in ids:
        parser.add_argument(id_name, type=kind)
    if options is not None:
        options(parser)
    add_api_arguments(parser)
    parser.set_defaults(func=func)


def command(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run a people's command: a `CliFailure` is one line on stderr and its exit code."""

    @functools.wraps(func)
    def run(args: argparse.Namespace) -> int:
        try:
            return int(func(args))
        except CliFailure as exc:
            print(f"leasehold: error: {printable(exc.message)}", file=sys.stderr)
            return int(exc.code)
        except BrokenPipeError:
            # `leasehold runs logs ... | head`: the reader left; nothing more to say.
            _silence_stdout()
            return int(Exit.OK)

    return run


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


# Server-sent events ----------------------------------------------------------------------------


@dataclass
class Event:
    """One server-sent event."""

    event: str
    data: Any
    id: str | None = None


def read_events(response: httpx.Response) -> Iterator[Event]:
    """Events of a ``text/event-stream`` answer as they arrive (comments and ``retry:`` skipped).

    Only a complete event (ended by a blank line) is yielded, so an event cut by a dropped
    connection is never half-seen.
    """
    name, event_id, data = "message", None, list[str]()
    for line in response.iter_lines():
        if not line:
            if data:
                text = "\n".join(data)
                try:
                    payload = json.loads(text)
                except ValueError:
                    payload = text
                yield Event(name, payload, event_id)
            name, event_id, data = "message", None, []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
        elif field == "id":
            event_id = value


@dataclass
class Reconnect:
    """Bounded reconnection: a stream that keeps failing for ``within`` seconds is given up."""

    within: float = 60.0
    first_delay: float = 0.5
    max_delay: float = 5.0

    def __post_init__(self) -> None:
        self.failing_since: float | None = None
        self.delay = self.first_delay
        # Whether the last connection (``stream_events``) failed and was waited for.
        self.waited = False

    def ok(self) -> None:
        """The stream delivered something: the next failure starts a new count."""
        self.failing_since = None
        self.delay = self.first_delay

    def wait(self, why: CliFailure, say: Callable[[str], None]) -> None:
        """Sleep before the next try, or raise ``why`` once the streak lasted ``within``."""
        now = time.monotonic()
        if self.failing_since is None:
            self.failing_since = now
        if now - self.failing_since >= self.within:
            raise why
        say(f"connection lost ({why.message}); reconnecting in {self.delay:.1f}s")
        time.sleep(self.delay)
        self.delay = min(self.max_delay, self.delay * 2)
        self.waited = True


def stream_events(
    api: Api,
    path: str,
    retry: Reconnect,
    say: Callable[[str], None],
    read_timeout: float,
    last_id: str | None = None,
    params: dict[str, Any] | None = None,
) -> Iterator[Event]:
    """The events of one connection to the stream at ``path`` (resumed after ``last_id``).

    An error answer the API may not give again (5xx) and a dropped connection wait on ``retry``
    (``retry.waited`` says so) and end the events; any other error answer raises.
    """
    import httpx

    retry.waited = False
    headers = {"Accept": "text/event-stream"}
    if last_id is not None:
        headers["Last-Event-ID"] = last_id
    timeout = httpx.Timeout(api.timeout, read=read_timeout)
    try:
        with api.http.stream("GET", path, params=params, headers=headers, timeout=timeout) as response:
            if response.status_code >= 400:
                response.read()
                failure = failure_of(response)
                if failure.code != Exit.UNREACHABLE:
                    raise failure
                retry.wait(failure, say)
                return
            for event in read_events(response):
                retry.ok()
                yield event
    except httpx.HTTPError as exc:
        retry.wait(api.unreachable(exc), say)


# Output ----------------------------------------------------------------------------------------


def human() -> bool:
    """Rich tables and bars on a terminal; plain text to a pipe or file."""
    return sys.stdout.isatty()


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


def answer(args: Any, value: Any, show: Callable[[Any], None]) -> int:
    """Print what the API answered: as JSON with ``--json``, else for people; exit OK."""
    if args.json:
        print_json(value)
    else:
        show(value)
    return int(Exit.OK)


def call_and_answer(args: argparse.Namespace, method: str, path: str, show: Callable[[Any], None]) -> int:
    """One call of the API, its answer printed (`answer`)."""
    return answer(args, api_from(args).call(method, path), show)


def list_page(
    args: argparse.Namespace,
    api: Api,
    path: str,
    params: dict[str, Any],
    columns: list[str],
    row: Callable[[dict[str, Any]], list[str]],
    more: Callable[[dict[str, Any]], str],
    whole: Collection[str] = (),
) -> int:
    """One page of a list: as JSON with ``--json``, else a table named after the path's last
    part, a ``row`` per item, and ``more(page)`` (the next page's command) when there is one."""
    page = api.call("GET", path, params=params)
    if args.json:
        print_json(page)
        return int(Exit.OK)
    table(path.rsplit("/", 1)[-1], columns, [row(item) for item in page.get("data", [])], whole=whole)
    if page.get("has_more"):
        note(f"more: {more(page)}")
    return int(Exit.OK)


def note(text: str) -> None:
    """A line for the person, on stderr (stdout stays the command's result); text from the API
    or a job cannot drive the terminal."""
    print(printable(text), file=sys.stderr, flush=True)


def table(title: str | None, columns: list[str], rows: list[list[str]], whole: Collection[str] = ()) -> None:
    """A rich table on a terminal; tab-separated lines with a header otherwise.

    Columns named in ``whole`` (ids a person copies) are never cut: on a narrow terminal the
    other columns wrap instead, every character still shown.
    """
    if human():
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        shown = Table(title=title, show_lines=False)
        for i, column in enumerate(columns):
            if column in whole:
                widest = max([len(column), *(len(printable(row[i])) for row in rows)])
                shown.add_column(column, no_wrap=True, min_width=widest)
            elif whole:
                shown.add_column(column, overflow="fold")
            else:
                shown.add_column(column)
        for row in rows:
            # Text from the API is shown as it is, never as rich markup.
            shown.add_row(*(Text(printable(cell)) for cell in row))
        Console().print(shown)
        return
    print("\t".join(columns))
    for row in rows:
        print("\t".join(printable(cell).replace("\t", " ") for cell in row))


def fields(pairs: list[tuple[str, Any]]) -> None:
    """One object as ``name: value`` lines (``None`` values left out)."""
    shown = [(name, str(value)) for name, value in pairs if value is not None and value != ""]
    if human():
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        for name, value in shown:
            grid.add_row(Text(name), Text(printable(value)))
        Console().print(grid)
        return
    for name, value in shown:
        print(f"{name}: {printable(value)}")


def seconds_text(seconds: float | None) -> str:
    """``1:05`` style, or ``-`` when unknown."""
    if seconds is None:
        return "-"
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
