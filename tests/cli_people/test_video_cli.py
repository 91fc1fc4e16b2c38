"""``leasehold video``: the real CLI against the real stack, with nothing but a URL and a key."""

from __future__ import annotations

import json
from pathlib import Path

import av
import pytest

from leasehold.devserver import free_port
from tests.ci_api.conftest import CIStack
from tests.cli_people.conftest import FAST_STEPS, MODEL, SIZE, SLOW_STEPS, assert_one_line_error, person

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

    # --json: stdout is exactly one JSON document, for get, a watch of a finished job, list.
    got = me.run("video", "get", video_id, "--json")
    assert got.returncode == 0, got.stderr
    video = json.loads(got.stdout)
    assert (video["id"], video["status"], video["progress"]) == (video_id, "completed", 100)
    watched = me.run("video", "get", video_id, "--watch", "--no-download", "--json")
    assert watched.returncode == 0, watched.stderr
    assert json.loads(watched.stdout)["status"] == "completed"
    listed = me.run("video", "list", "--json", "--limit", "5")
    assert listed.returncode == 0, listed.stderr
    assert video_id in [v["id"] for v in json.loads(listed.stdout)["data"]]
    plain = me.run("video", "list")
    assert plain.returncode == 0 and plain.stdout.splitlines()[0].startswith("id\tstatus"), plain.stdout
    assert any(line.startswith(f"{video_id}\tcompleted\t100%") for line in plain.stdout.splitlines())

    # The thumbnail variant, into a directory, named by its media type.
    thumb = me.run("video", "download", video_id, "--variant", "thumbnail", "-o", str(tmp_path), "--json")
    assert thumb.returncode == 0, thumb.stderr
    saved = json.loads(thumb.stdout)
    path = Path(saved["path"])
    assert path.parent == tmp_path and path.stat().st_size == saved["bytes"] > 0
    head = path.read_bytes()[:12]
    assert head.startswith(b"\xff\xd8") or head.startswith(b"\x89PNG") or head[8:12] == b"WEBP", head
    again = me.run("video", "download", video_id, "-o", str(tmp_path / "again.mp4"))
    assert again.returncode == 0 and (tmp_path / "again.mp4").read_bytes() == data

    # Another tenant's key sees no such video.
    other = person(people_stack)
    for argv in (("video", "get", video_id), ("video", "download", video_id), ("video", "cancel", video_id)):
        refused = other.run(*argv, "-o", str(tmp_path / "x")) if argv[1] == "download" else other.run(*argv)
        assert refused.returncode == 3, (argv, refused.stderr)
        assert_one_line_error(refused, "not found")
    assert not (tmp_path / "x").exists()


def test_exit_codes_say_what_happened(people_stack: CIStack, tmp_path: Path) -> None:
    me = person(people_stack)
    # A bad key: 4, the API's message, no traceback.
    bad_key = me.run("video", "list", LEASEHOLD_API_KEY="sk-not-a-key")
    assert bad_key.returncode == 4, bad_key.stderr
    assert_one_line_error(bad_key)
    no_key = me.run("runs", "list", LEASEHOLD_API_KEY="")
    assert no_key.returncode == 4 and "LEASEHOLD_API_KEY" in no_key.stderr
    # Not found: 3.
    missing = me.run("video", "get", "video_0000000000000000")
    assert missing.returncode == 3, missing.stderr
    assert_one_line_error(missing, "not found")
    # The API refuses a field: 2, naming the field.
    bad_size = me.run("video", "create", "--prompt", "x", "--size", "huge", "--json")
    assert bad_size.returncode == 2, bad_size.stderr
    assert_one_line_error(bad_size, "size")
    # An id that would change the URL path never leaves the CLI.
    traversal = me.run("video", "get", "../runs")
    assert traversal.returncode == 2 and "not a video id" in traversal.stderr
    # Nothing listens: 6.
    unreachable = me.run("video", "list", LEASEHOLD_API_URL=f"http://127.0.0.1:{free_port()}")
    assert unreachable.returncode == 6, unreachable.stderr
    assert_one_line_error(unreachable, "did not answer")

    # Cancelled: 5, and the JSON of the cancelled job on stdout.
    created = me.run(
        "video", "create", "--prompt", "a long one", "--model", MODEL, "--size", SIZE, "--seconds", "1",
        "--steps", str(SLOW_STEPS), "--json",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    video_id = json.loads(created.stdout)["id"]
    cancelled = me.run("video", "cancel", video_id, "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["id"] == video_id
    watched = me.run("video", "get", video_id, "--watch", "-o", str(tmp_path / "never.mp4"), "--json")
    assert watched.returncode == 5, watched.stderr
    assert json.loads(watched.stdout)["status"] == "cancelled"
    assert not (tmp_path / "never.mp4").exists()
    # It has no content: the API refuses the download (409: 7), and no file is left.
    content = me.run("video", "download", video_id, "-o", str(tmp_path / "never.mp4"))
    assert content.returncode == 7, content.stderr
    assert_one_line_error(content)
    assert not (tmp_path / "never.mp4").exists()
