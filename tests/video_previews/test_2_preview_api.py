"""Previews through the real API and worker processes: ``content?variant=preview`` and the
``video.preview`` SSE event, with the same owner rules as the other variants."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import av

from tests.video_webhooks.stack import PREVIEW_EVERY, PREVIEW_MAX_SIDE, Stack, create_video, wait_until
from workflows.video.types import job_object_prefix

STEPS = 40


def sse(response: Any, limit: int = 5000) -> Iterator[dict[str, Any]]:
    """The events of a text/event-stream response, as they arrive."""
    event: dict[str, Any] = {}
    for count, line in enumerate(response.iter_lines()):
        assert count < limit, "the event stream did not end"
        if not line:
            if "data" in event:
                yield event
            event = {}
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            event["data"] = json.loads(value)
        elif name in ("id", "event"):
            event[name] = value


def test_preview_variant_and_sse_event(stack: Stack) -> None:
    alice, mallory = stack.caller(), stack.caller()
    video = create_video(alice, steps=STEPS)
    path = f"/v1/videos/{video['id']}/content"

    # Before the first preview: a clear 404, not a 500 or an empty body.
    early = alice.get(path, params={"variant": "preview"})
    assert early.status_code == 404, early.text
    assert early.json()["error"]["code"] == "preview_not_available"

    fetched: list[tuple[int, bytes, str]] = []
    stranger: list[int] = []

    def on_preview(event: dict[str, Any]) -> None:
        if fetched:
            return
        got = alice.get(path, params={"variant": "preview"})
        fetched.append((got.status_code, got.content, got.headers.get("content-type", "")))
        stranger.append(mallory.get(path, params={"variant": "preview"}).status_code)

    previews: list[dict[str, Any]] = []
    with alice.stream("GET", f"/v1/videos/{video['id']}/events", timeout=120) as response:
        assert response.status_code == 200
        events = []
        for event in sse(response):
            events.append(event)
            if event.get("event") == "video.preview":
                previews.append(event["data"])
                on_preview(event)

    assert events[-1]["event"] == "video.updated" and events[-1]["data"]["status"] == "completed"
    assert previews, [e.get("event") for e in events]
    steps = [p["step"] for p in previews]
    assert steps == sorted(steps) and all(step % PREVIEW_EVERY == 0 and 0 < step < STEPS for step in steps)
    assert all(p["id"] == video["id"] and p["url"].endswith("content?variant=preview") for p in previews)

    (status, body, content_type) = fetched[0]
    assert status == 200 and content_type == "image/webp", (status, body[:300])
    assert body[:4] == b"RIFF" and body[8:12] == b"WEBP"
    with av.open(io.BytesIO(body)) as container:
        frame = next(container.decode(video=0))
        assert frame.height <= PREVIEW_MAX_SIDE and frame.width > frame.height  # a strip of frames
    # Another tenant's request for it looks like a missing video.
    assert stranger == [404]

    # Once the job ended previews are gone; the video is what there is to see.
    after = alice.get(path, params={"variant": "preview"})
    assert after.status_code == 404 and after.json()["error"]["code"] == "preview_not_available"
    assert alice.get(path).status_code == 200
    leftovers = wait_until(
        lambda: not [k for k in stack_store_keys(stack, video["id"]) if "/previews/" in k], 30, "preview cleanup"
    )
    assert leftovers
    assert alice.get(path, params={"variant": "bogus"}).status_code in (400, 422)


def stack_store_keys(stack: Stack, video_id: str) -> list[str]:
    from leasehold.storage import open_store

    return open_store(stack.settings).list(job_object_prefix(video_id) + "/")
