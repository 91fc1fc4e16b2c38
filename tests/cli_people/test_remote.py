"""The CLI's own pieces without a stack: the event-stream reader, error lines, terminal safety."""

from __future__ import annotations

import httpx

from cli.remote import Exit, failure_of, read_events
from cli.runs import for_terminal


def _stream(body: bytes) -> httpx.Response:
    return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})


def test_read_events_yields_complete_events_only() -> None:
    body = (
        b"retry: 1000\n\n"
        b": keep-alive\n\n"
        b'id: 0\nevent: log\ndata: {"seq":0,"text":"a\\n"}\n\n'
        b"event: note\ndata: first\ndata: second\n\n"
        # Cut mid-event (no blank line): never yielded half-read.
        b'id: 1\nevent: log\ndata: {"seq":1,'
    )
    events = list(read_events(_stream(body)))
    assert [(e.event, e.id, e.data) for e in events] == [
        ("log", "0", {"seq": 0, "text": "a\n"}),
        ("note", None, "first\nsecond"),
    ]


def test_api_errors_become_one_line_with_the_field_and_an_exit_code() -> None:
    def answer(status: int, error: object) -> httpx.Response:
        return httpx.Response(status, json={"error": error})

    bad = failure_of(answer(422, {"message": "must be WIDTHxHEIGHT", "param": "size", "code": "invalid_request"}))
    assert (bad.message, bad.code) == ("size: must be WIDTHxHEIGHT", Exit.USAGE)
    named = failure_of(answer(400, {"message": "size must be WIDTHxHEIGHT", "param": "size"}))
    assert named.message == "size must be WIDTHxHEIGHT"
    assert failure_of(answer(401, {"message": "invalid API key"})).code == Exit.AUTH
    assert failure_of(answer(404, {"message": "run not found"})).code == Exit.NOT_FOUND
    assert failure_of(answer(409, {"message": "not retryable"})).code == Exit.REFUSED
    assert failure_of(answer(503, {"message": "temporal unavailable"})).code == Exit.UNREACHABLE
    # Not the API's shape (a proxy's HTML page): the status, not the body.
    proxy = failure_of(httpx.Response(502, text="<html>bad gateway</html>"))
    assert (proxy.message, proxy.code) == ("the API answered 502", Exit.UNREACHABLE)
    # A hostile message cannot drive the terminal.
    sneaky = failure_of(answer(400, {"message": "bad\x1b]0;pwned\x07 value\nsecond line"}))
    assert "\x1b" not in sneaky.message and "\n" not in sneaky.message and "\x07" not in sneaky.message


def test_a_jobs_log_keeps_colours_but_no_other_escape_sequences_on_a_terminal() -> None:
    text = "\x1b[1;31mred\x1b[0m \x1b]0;new title\x07a \x1b]52;c;cGF5bG9hZA==\x1b\\b \x1b[2J\x1b[Hc\x07\x08\r\n\tend"
    assert for_terminal(text) == "\x1b[1;31mred\x1b[0m a b c\r\n\tend"
