"""``leasehold video``: the real CLI against the real stack, with nothing but a URL and a key."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

import av
import pytest

from leasehold.devserver import free_port
from tests.ci_api.conftest import CIStack
from tests.cli_people.conftest import FAST_STEPS, MODEL, SIZE, SLOW_STEPS, assert_one_line_error, person, run_all

pytestmark = pytest.mark.slow


def test_create_watch_downloads_a_playable_mp4(people_stack: CIStack, tmp_path: Path) -> None:
    me = person(people_stack)
    out = tmp_path / "kite.mp4"
    result = me.run(
        "video", "create", "--prompt", "a red kite over the sea", "--model", MODEL, "--size", SIZE,
        "--seconds", "1", "--steps", str(FAST_STEPS), "--watch", "-o", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    # Not a terminal: one plain line per change on stderr, ending at 100 %.
    progress = [line for line in result.stderr.splitlines() if line.startswith("video_")]
    assert progress and " completed 100% " in progress[-1] + " ", result.stderr
    video_id = progress[-1].split()[0]
    assert f"saved {out}" in result.stderr
    assert f"id: {video_id}" in result.stdout and "status: completed" in result.stdout

    # A playable MP4 of the asked size: an ftyp box first, frames PyAV decodes.
    data = out.read_bytes()
    assert data[4:8] == b"ftyp", data[:16]
    with av.open(str(out)) as container:
        stream = container.streams.video[0]
        frames = sum(1 for _ in container.decode(stream))
        assert (stream.codec_context.width, stream.codec_context.height) == (180, 320)
    assert frames >= 1

    other = person(people_stack)
    got, watched, listed, plain, thumb, again, *refused = run_all(
        # --json: stdout is exactly one JSON document, for get, a watch of a finished job, list.
        (me, ("video", "get", video_id, "--json")),
        (me, ("video", "get", video_id, "--watch", "--no-download", "--json")),
        (me, ("video", "list", "--json", "--limit", "5")),
        (me, ("video", "list")),
        # The thumbnail variant, into a directory, named by its media type; the video again.
        (me, ("video", "download", video_id, "--variant", "thumbnail", "-o", str(tmp_path), "--json")),
        (me, ("video", "download", video_id, "-o", str(tmp_path / "again.mp4"))),
        # Another tenant's key sees no such video.
        (other, ("video", "get", video_id)),
        (other, ("video", "download", video_id, "-o", str(tmp_path / "x"))),
        (other, ("video", "cancel", video_id)),
    )
    assert got.returncode == 0, got.stderr
    video = json.loads(got.stdout)
    assert (video["id"], video["status"], video["progress"]) == (video_id, "completed", 100)
    assert watched.returncode == 0, watched.stderr
    assert json.loads(watched.stdout)["status"] == "completed"
    assert listed.returncode == 0, listed.stderr
    assert video_id in [v["id"] for v in json.loads(listed.stdout)["data"]]
    assert plain.returncode == 0 and plain.stdout.splitlines()[0].startswith("id\tstatus"), plain.stdout
    assert any(line.startswith(f"{video_id}\tcompleted\t100%") for line in plain.stdout.splitlines())

    assert thumb.returncode == 0, thumb.stderr
    saved = json.loads(thumb.stdout)
    path = Path(saved["path"])
    assert path.parent == tmp_path and path.stat().st_size == saved["bytes"] > 0
    head = path.read_bytes()[:12]
    assert head.startswith(b"\xff\xd8") or head.startswith(b"\x89PNG") or head[8:12] == b"WEBP", head
    assert again.returncode == 0 and (tmp_path / "again.mp4").read_bytes() == data

    for result in refused:
        assert result.returncode == 3, (result.args, result.stderr)
        assert_one_line_error(result, "not found")
    assert not (tmp_path / "x").exists()

    # At a terminal: the rich progress bar (to 100 %) and a rich table.
    code, screen = me.run_in_terminal("video", "get", video_id, "--watch", "--no-download")
    assert code == 0 and "100%" in screen and "━" in screen and "Traceback" not in screen, screen
    code, screen = me.run_in_terminal("video", "list", "--limit", "3")
    assert code == 0 and video_id in screen and "┃" in screen, screen


def test_exit_codes_say_what_happened(people_stack: CIStack, tmp_path: Path) -> None:
    me = person(people_stack)
    created, bad_key, no_key, missing, bad_size, traversal, unreachable = run_all(
        (me, ("video", "create", "--prompt", "a long one", "--model", MODEL, "--size", SIZE, "--seconds", "1",
              "--steps", str(SLOW_STEPS), "--json")),
        (replace(me, key="sk-not-a-key"), ("video", "list")),
        (replace(me, key=""), ("runs", "list")),
        (me, ("video", "get", "video_0000000000000000")),
        (me, ("video", "create", "--prompt", "x", "--size", "huge", "--json")),
        (me, ("video", "get", "../runs")),
        (replace(me, url=f"http://127.0.0.1:{free_port()}"), ("video", "list")),
    )  # fmt: skip
    # A bad key: 4, the API's message, no traceback; no key at all: 4 too.
    assert bad_key.returncode == 4, bad_key.stderr
    assert_one_line_error(bad_key)
    assert no_key.returncode == 4 and "LEASEHOLD_API_KEY" in no_key.stderr
    # Not found: 3.
    assert missing.returncode == 3, missing.stderr
    assert_one_line_error(missing, "not found")
    # The API refuses a field: 2, naming the field.
    assert bad_size.returncode == 2, bad_size.stderr
    assert_one_line_error(bad_size, "size")
    # An id that would change the URL path never leaves the CLI.
    assert traversal.returncode == 2 and "not a video id" in traversal.stderr
    # Nothing listens: 6.
    assert unreachable.returncode == 6, unreachable.stderr
    assert_one_line_error(unreachable, "did not answer")

    # While the slow job holds the only GPU worker, a second one waits: its watch shows the
    # queue position, then runs to completion once the slow one is cancelled.
    assert created.returncode == 0, created.stderr
    video_id = json.loads(created.stdout)["id"]
    second = me.run(
        "video", "create", "--prompt", "next in line", "--model", MODEL, "--size", SIZE, "--seconds", "1",
        "--steps", str(FAST_STEPS), "--json",
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    second_id = json.loads(second.stdout)["id"]
    watcher = me.start("video", "get", second_id, "--watch", "--no-download")
    progress: list[str] = []
    queued = threading.Event()

    def read() -> None:
        assert watcher.stderr is not None
        for line in watcher.stderr:
            progress.append(line.rstrip("\n"))
            if line.startswith(f"{second_id} queued "):
                queued.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert queued.wait(60), progress
        # Cancelled: 5, and the JSON of the cancelled job on stdout.
        cancelled = me.run("video", "cancel", video_id, "--json")
        assert cancelled.returncode == 0, cancelled.stderr
        assert json.loads(cancelled.stdout)["id"] == video_id
        assert watcher.wait(timeout=120) == 0, progress
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait(timeout=10)
    reader.join(timeout=10)
    waiting = [line for line in progress if line.startswith(f"{second_id} queued ")]
    assert waiting and all(" position " in line for line in waiting), progress
    assert f"{second_id} completed 100%" in progress, progress
    never = tmp_path / "never.mp4"
    watched, content = run_all(
        (me, ("video", "get", video_id, "--watch", "-o", str(never), "--json")),
        # It has no content: the API refuses the download (409: 7), and no file is left.
        (me, ("video", "download", video_id, "-o", str(never))),
    )
    assert watched.returncode == 5, watched.stderr
    assert json.loads(watched.stdout)["status"] == "cancelled"
    assert content.returncode == 7, content.stderr
    assert_one_line_error(content)
    assert not never.exists() and list(tmp_path.iterdir()) == []
