"""``leasehold runs``: the real CLI against a real run (git push -> webhook -> CI worker), its
live log followed through a loopback proxy that drops the connection mid-stream."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import push_workflow, wait_for
from tests.cli_people.conftest import Person, assert_one_line_error, person, run_all
from tests.faults import TcpProxy

pytestmark = pytest.mark.slow

LINES = 60
WORKFLOW = f"""
name: people
on:
  push:
    branches: [main]
jobs:
  talk:
    runs-on: linux
    steps:
      - run: |
          for i in $(seq 1 {LINES}); do echo "line $i"; sleep 0.1; done
  fail:
    runs-on: linux
    steps:
      - run: |
          echo "about to fail"
          exit 3
  hang:
    runs-on: linux
    steps:
      - run: sleep 300
"""
EXPECTED = [f"line {i}" for i in range(1, LINES + 1)]


def _follow_with_a_drop(me: Person, rid: str, proxy: TcpProxy) -> tuple[int, list[str], str, int]:
    """Follow ``talk``'s log through ``proxy``, cut every connection once line 15 is printed,
    restore a second later; (exit code, stdout lines, stderr, lines printed before the cut)."""
    follower = me.start("runs", "logs", rid, "talk", "--follow", "--reconnect-for", "60")
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        assert follower.stdout is not None
        for line in follower.stdout:
            lines.append(line.rstrip("\n"))
            if line.strip() == "line 15":
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert seen.wait(120), f"line 15 never came; so far: {lines}"
        before_cut = sum(1 for line in lines if line.startswith("line "))
        proxy.cut()
        time.sleep(1.0)
        proxy.restore()
        code = follower.wait(timeout=120)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait(timeout=10)
    reader.join(timeout=10)
    assert follower.stderr is not None
    return code, lines, follower.stderr.read(), before_cut


def test_runs_follow_resume_exit_codes_retry_and_cancel(people_stack: CIStack) -> None:
    client = people_stack.new_tenant()
    key = client.headers["authorization"].removeprefix("Bearer ")
    pushed = push_workflow(people_stack, WORKFLOW, client=client)
    rid = pushed.run_id
    me = Person(client.tenant_id, key, people_stack.base_url)  # type: ignore[attr-defined]

    # The live log through a proxy that resets the connection mid-stream: every line once.
    with TcpProxy("127.0.0.1", people_stack.settings.api_port) as proxy:
        code, lines, stderr, before_cut = _follow_with_a_drop(Person(me.tenant_id, key, proxy.url), rid, proxy)
    assert code == 0, stderr
    assert before_cut < LINES, "the job had finished before the connection dropped"
    assert [line for line in lines if line.startswith("line ")] == EXPECTED, (lines, stderr)
    assert "reconnecting" in stderr and proxy.forwarded >= 2, (stderr, proxy.forwarded)
    assert "Traceback" not in stderr

    other = person(people_stack)
    stored, as_json, failed, got, table, *refused = run_all(
        (me, ("runs", "logs", rid, "talk")),
        (me, ("runs", "logs", rid, "talk", "--json")),
        # A failed job: its log, then exit 1.
        (me, ("runs", "logs", rid, "fail", "--follow")),
        (me, ("runs", "get", rid, "--json")),
        (me, ("runs", "get", rid)),
        # Another tenant: not found (3), for the run and its log.
        (other, ("runs", "get", rid)),
        (other, ("runs", "logs", rid, "talk", "--follow")),
        (other, ("runs", "cancel", rid)),
    )
    # Exactly the stored log, the runner's own lines included: nothing twice, nothing missing.
    assert stored.returncode == 0 and stored.stdout.splitlines() == lines, (stored.stdout, lines)
    # The stored log as JSON lines: the same text, then its end.
    events = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert "".join(e["text"] for e in events if e["event"] == "log") == stored.stdout
    assert events[-1]["event"] == "end" and events[-1]["status"] == "success"
    assert failed.returncode == 1, failed.stderr
    assert "about to fail" in failed.stdout
    assert got.returncode == 0, got.stderr
    statuses = {j["id"]: j["status"] for j in json.loads(got.stdout)["jobs"]}
    assert (statuses["talk"], statuses["fail"]) == ("success", "failure"), statuses
    assert table.returncode == 0 and "fail\tfailure" in table.stdout, table.stdout
    for result in refused:
        assert result.returncode == 3, (result.args, result.stderr)
        assert_one_line_error(result, "not found")

    # At a terminal: rich tables of the run and its jobs.
    code, screen = me.run_in_terminal("runs", "get", rid)
    assert code == 0 and "┃" in screen and "failure" in screen and "Traceback" not in screen, screen

    def listed() -> bool:
        page = json.loads(me.run("runs", "list", "--repo", pushed.repo_id, "--json").stdout)
        return rid in [r["id"] for r in page["data"]]

    assert wait_for("the run in runs list", listed, timeout=30, interval=0.5)

    # Retry without a job: the failed one. A job that passed cannot be retried: 7, one line.
    retried = me.run("runs", "retry", rid, "--json")
    assert retried.returncode == 0, retried.stderr
    assert [a["job_id"] for a in json.loads(retried.stdout)["data"]] == ["fail"]
    refused_retry = me.run("runs", "retry", rid, "talk")
    assert refused_retry.returncode == 7, refused_retry.stderr
    assert_one_line_error(refused_retry)
    # While the run goes on (``hang``), re-running all of it is refused: 7, saying why.
    busy = me.run("runs", "rerun", rid)
    assert busy.returncode == 7 and "has not finished" in busy.stderr, busy.stderr
    assert_one_line_error(busy)

    # Cancel while `hang` runs: its follower ends with 5.
    follower = me.start("runs", "logs", rid, "hang", "--follow")
    try:
        cancelled = me.run("runs", "cancel", rid, "--json")
        assert cancelled.returncode == 0, cancelled.stderr
        assert json.loads(cancelled.stdout)["id"] == rid
        _out, err = follower.communicate(timeout=120)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait(timeout=10)
    assert follower.returncode == 5, err
    # The cancelled run is re-run whole: every job again, as attempt 3 of the run (the retry
    # of `fail` was its attempt 2, as on GitHub, where a re-run of failed jobs counts too).
    wait_for("the run to end", lambda: json.loads(me.run("runs", "get", rid, "--json").stdout)["status"] == "cancelled")
    rerun = me.run("runs", "rerun", rid, "--json")
    assert rerun.returncode == 0, rerun.stderr
    answer = json.loads(rerun.stdout)
    assert answer["run_attempt"] == 3 and {"talk", "fail", "hang"} <= set(answer["reset_jobs"]), answer
    assert me.run("runs", "cancel", rid).returncode == 0


WAITING = """
on: push
jobs:
  nowhere:
    runs-on: [linux, gpu-nobody-serves]
    steps:
      - run: echo never
"""


def test_follow_says_what_a_job_waits_for(people_stack: CIStack) -> None:
    me = person(people_stack)
    client = httpx.Client(base_url=people_stack.base_url, headers={"Authorization": f"Bearer {me.key}"}, timeout=30)
    pushed = push_workflow(people_stack, WAITING, client=client)
    follower = me.start("runs", "logs", pushed.run_id, "nowhere", "--follow")
    found: list[str] = []

    def read() -> None:
        assert follower.stderr is not None
        for line in follower.stderr:
            found.append(line.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_for("a line saying what the job waits for", lambda: any("nowhere:" in line for line in found), 60)
    finally:
        follower.kill()
        follower.wait(timeout=10)
        me.run("runs", "cancel", pushed.run_id)
    said = next(line for line in found if "nowhere:" in line)
    assert "gpu-nobody-serves" in said or "no worker" in said or "label" in said, found
