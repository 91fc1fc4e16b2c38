"""``on.schedule`` end to end on real processes: a push to the default branch makes one Temporal
Schedule per cron entry (GitHub's five-minute floor applied, UTC); triggering it through the
Schedule runs the file at the branch's head with ``github.event_name == 'schedule'`` and the
cron as written in ``github.event.schedule``, one run per tick; a push that changes the entries
updates and deletes schedules; a push elsewhere leaves them alone; removing the file removes
them."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.client import Client

from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import WORKFLOW_PATH, done_push, get_run, log_text, wait_for, wait_run
from tests.gitrepo import git
from workflows.ci.ids import push_id

WORKFLOW = """
name: Nightly
on:
  schedule:
    - cron: '*/1 * * * *'
    - cron: '30 5 * * MON'
jobs:
  tick:
    runs-on: linux
    steps:
      - run: echo "event=${{ github.event_name }} cron=[${{ github.event.schedule }}] sha=${{ github.sha }}"
"""


def _temporal(stack: CIStack, action: Callable[[Client], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        client = await Client.connect(stack.settings.temporal_address)
        return await action(client)

    return asyncio.run(main())


def _schedules(stack: CIStack, repo_id: str) -> dict[str, dict[str, Any]]:
    """The repository's schedules: id -> its cron as written (from its note) and its next fire
    times (the server keeps a cron as calendars, so the times show how it reads it)."""

    async def read(client: Client) -> dict[str, dict[str, Any]]:
        found = {}
        async for entry in await client.list_schedules(query=f"RepoId = '{repo_id}'"):
            described = await client.get_schedule_handle(entry.id).describe()
            note = described.schedule.state.note or ""
            found[entry.id] = {
                "cron": note.split("'")[1] if note.count("'") >= 2 else None,
                "note": note,
                "times": list(described.info.next_action_times),
            }
        return found

    return _temporal(stack, read)


def _pushed(stack: CIStack, client, remote, repo_id: str, ref: str = "refs/heads/main") -> dict:  # type: ignore[no-untyped-def]
    sha = remote.commit("ci")
    remote.push(f"HEAD:{ref}")
    pid = push_id(repo_id, sha, ref)
    return wait_for("the push to be listed", lambda: done_push(client, pid))


def test_a_schedule_runs_the_default_branch_and_follows_its_file(ci_engine: CIStack) -> None:
    client = ci_engine.new_tenant()
    remote = ci_engine.git_remote()
    repo_id, _, _ = ci_engine.register(client, remote)
    remote.write(WORKFLOW_PATH, WORKFLOW)
    push = _pushed(ci_engine, client, remote, repo_id)
    # A schedule-only file starts nothing on a push.
    assert push["runs"] == [] and push["not_triggered"] == [WORKFLOW_PATH], push

    schedules = wait_for("two schedules", lambda: len(s := _schedules(ci_engine, repo_id)) == 2 and s)
    crons = sorted(s["cron"] for s in schedules.values())
    assert crons == ["*/1 * * * *", "30 5 * * MON"], crons
    assert all(WORKFLOW_PATH in s["note"] for s in schedules.values())
    by_cron = {s["cron"]: s for s in schedules.values()}
    # Every minute, as GitHub runs it: every five minutes at most, on the minute, UTC.
    times = by_cron["*/1 * * * *"]["times"]
    assert len(times) >= 2 and all(t.minute % 5 == 0 and t.second == 0 for t in times), times
    assert {(b - a).total_seconds() for a, b in itertools.pairwise(times)} == {300.0}, times
    # Mondays at 05:30 UTC.
    assert all((t.weekday(), t.hour, t.minute) == (0, 5, 30) for t in by_cron["30 5 * * MON"]["times"])

    # Triggered now through the Schedule: the branch's head runs, as a schedule event.
    every_minute = next(sid for sid, s in schedules.items() if s["cron"] == "*/1 * * * *")
    head = git(remote.work, "rev-parse", "HEAD").stdout.strip()

    def runs() -> list[dict]:
        listed = client.get("/v1/runs", params={"repo": repo_id}).json()["data"]
        return [r for r in listed if get_run(client, r["id"])["event"] == "schedule"]

    _temporal(ci_engine, lambda c: c.get_schedule_handle(every_minute).trigger())
    (first,) = wait_for("the scheduled run", lambda: runs() or None)
    run = wait_run(client, first["id"])
    assert run["status"] == "success", run
    assert run["commit_sha"] == head
    text = log_text(client, first["id"], "tick")
    assert f"event=schedule cron=[*/1 * * * *] sha={head}" in text, text
    # Each tick is a run of its own.
    _temporal(ci_engine, lambda c: c.get_schedule_handle(every_minute).trigger())
    wait_for("a second scheduled run", lambda: len(runs()) == 2)

    # A push to another branch leaves the schedules alone.
    remote.write(WORKFLOW_PATH, WORKFLOW.replace("30 5 * * MON", "0 0 * * *"))
    _pushed(ci_engine, client, remote, repo_id, "refs/heads/feature")
    assert sorted(s["cron"] for s in _schedules(ci_engine, repo_id).values()) == crons

    # On the default branch: one entry left, changed; the other schedule is deleted.
    remote.write(WORKFLOW_PATH, WORKFLOW.replace("    - cron: '30 5 * * MON'\n", "").replace("*/1", "15"))
    _pushed(ci_engine, client, remote, repo_id)
    changed = wait_for(
        "the schedules to follow the file",
        lambda: [s["cron"] for s in _schedules(ci_engine, repo_id).values()] == ["15 * * * *"],
    )
    assert changed

    # The file removed: no schedule left.
    git(remote.work, "rm", "-q", WORKFLOW_PATH)
    remote.write("README.md", "no workflows\n")
    _pushed(ci_engine, client, remote, repo_id)
    wait_for("the schedules to be removed", lambda: _schedules(ci_engine, repo_id) == {})


def test_a_bad_schedule_fails_its_run_naming_the_line(ci_engine: CIStack) -> None:
    client = ci_engine.new_tenant()
    remote = ci_engine.git_remote()
    repo_id, _, _ = ci_engine.register(client, remote)
    remote.write(WORKFLOW_PATH, WORKFLOW.replace("'*/1 * * * *'", "'61 * * * *'"))
    push = _pushed(ci_engine, client, remote, repo_id)
    (ref,) = push["runs"]
    run = wait_run(client, ref["run_id"])
    assert run["status"] == "failure"
    assert run["error"] == f"{WORKFLOW_PATH}:5: on.schedule.cron: '61 * * * *': minute: '61' is outside 0-59", run
    assert _schedules(ci_engine, repo_id) == {}
