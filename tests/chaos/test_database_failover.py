"""8. The database fails over: the embedded stack (``leasehold up``) on a private PostgreSQL of
its own (``initdb`` into a temp dir, its own loopback port), restarted (``pg_ctl restart -m
fast``, every connection dropped) and then stopped for ``OUTAGE_SECONDS`` while clients submit
videos, read statuses and CI runs are running.

What must hold: every answer is a success, a client error, or a 503 with ``Retry-After``
(never a 500 or another 5xx, never a dropped connection); every accepted video completes,
once; every CI run succeeds, each job in one attempt (the outage spends none of the job's
attempts) with its whole log and no gap.

The outage lasts ``LEASEHOLD_CHAOS_DB_OUTAGE_SECONDS`` (default 12 s: the issue's 30 s made
this test a minute longer in ``make test``; CI jobs start and end inside the outage either way).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from leasehold.database import init_database
from leasehold.records.api_keys import create_key
from leasehold.temporal import connect
from testing.checker import History, Observation, check
from testing.postgres import PrivatePostgres
from testing.stack import (
    EmbeddedStack,
    observe_videos,
    seeded,
    start_embedded,
    stop_embedded,
)
from tests.chaos.clients import (
    Answers,
    full_log,
    git,
    listed_videos,
    read_statuses,
    submit_videos,
    until_ok,
    wait_settled,
)

pytestmark = pytest.mark.chaos

log = logging.getLogger("chaos")

OUTAGE_SECONDS = float(os.environ.get("LEASEHOLD_CHAOS_DB_OUTAGE_SECONDS", "12"))
RETRY_AFTER = 1
METRICS_TOKEN = "chaos-metrics-token"
VIDEOS = 10
RUNS = 3
BUILD_LINES = 16  # one line per 0.5 s: the first builds run into the outage, the last starts in it
TEST_LINES = 4
WEBHOOK_SECRET = "chaos-webhook-secret"
CI_WORKFLOW = f"""
on: push
jobs:
  build:
    runs-on: linux
    steps:
      - run: for i in $(seq 1 {BUILD_LINES}); do echo "build $i"; sleep 0.5; done
  test:
    needs: build
    runs-on: linux
    steps:
      - run: for i in $(seq 1 {TEST_LINES}); do echo "test $i"; sleep 0.5; done
"""
LINES = {"build": BUILD_LINES, "test": TEST_LINES}


@pytest.fixture
def stack_on_postgres(private_postgres: PrivatePostgres, tmp_path: Path) -> Iterator[EmbeddedStack]:
    env = {
        "LEASEHOLD_DATABASE_URL": private_postgres.url,
        "LEASEHOLD_API_DATABASE_RETRY_AFTER_SECONDS": str(RETRY_AFTER),
        "LEASEHOLD_METRICS_TOKEN": METRICS_TOKEN,
    }
    # The root is also the one local clone URLs must be below: the test keeps its repository here.
    stack = start_embedded(tmp_path, env)
    try:
        yield stack
    finally:
        stop_embedded(stack)


def api_500s(stack: EmbeddedStack) -> float:
    text = httpx.get(f"{stack.api_url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("leasehold_api_requests_total{") and 'status="5' in line and 'status="503"' not in line:
            total += float(line.split()[-1])
    return total


def test_a_database_failover_loses_nothing_and_answers_503_with_retry_after(
    stack_on_postgres: EmbeddedStack, private_postgres: PrivatePostgres, chaos_seed: int, tmp_path: Path
) -> None:
    stack, database = stack_on_postgres, private_postgres
    rng = seeded(chaos_seed, "database-failover")
    answers = Answers()
    history = History(tmp_path / "history.jsonl")
    key = create_key(init_database(database.url), "t-failover", "chaos", "paid")
    http = answers.client(stack.api_url, key)

    # CI: a repository and RUNS pushes, listed before the database goes (a push's listing reads it).
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / ".github" / "workflows").mkdir(parents=True)
    (repo / ".github" / "workflows" / "ci.yml").write_text(CI_WORKFLOW)
    created = until_ok(
        http, "POST", "/v1/repos", answers,
        json={"name": f"chaos/db{chaos_seed}", "clone_url": str(repo), "webhook_secret": WEBHOOK_SECRET},
    )  # fmt: skip
    repo_id = created["id"]
    run_ids: list[str] = []
    for n in range(RUNS):
        (repo / "n.txt").write_text(str(n))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"c{n}")
        sha = git(repo, "rev-parse", "HEAD")
        body = {"repo_id": repo_id, "commit_sha": sha, "ref": "refs/heads/main"}
        push = until_ok(http, "POST", "/v1/hooks/push", answers, json=body)
        for _ in range(300):
            runs = until_ok(http, "GET", f"/v1/pushes/{push['id']}", answers).get("runs") or []
            if runs:
                break
            time.sleep(0.2)
        assert runs, "the push created no run"
        run_ids.extend(r["run_id"] for r in runs)

    # Videos submitted across the whole fault; status reads all along.
    keys = [f"failover-{chaos_seed}-{i}" for i in range(VIDEOS)]
    pace = (OUTAGE_SECONDS + 8) / VIDEOS
    submitter = threading.Thread(target=submit_videos, args=(http, history, answers, keys, pace), daemon=True)
    stop_reading = threading.Event()
    reader = threading.Thread(target=read_statuses, args=(http, answers, repo_id, stop_reading), daemon=True)
    submitter.start()
    reader.start()

    time.sleep(rng.uniform(1.0, 3.0))
    database.restart("fast")
    log.warning("seed=%d: database restarted (fast); stopping it for %.0f s", chaos_seed, OUTAGE_SECONDS)
    time.sleep(rng.uniform(0.5, 2.0))
    database.stop("fast")
    time.sleep(OUTAGE_SECONDS)
    database.start()
    log.warning("database back")

    submitter.join(timeout=180)
    assert not submitter.is_alive(), "the submits did not end"

    wait_settled(http, answers, run_ids, 120)
    stop_reading.set()
    reader.join(timeout=60)

    # No 5xx but 503 with Retry-After, to these clients or to anyone (the API's own count).
    assert answers.wrong == [], "\n".join(answers.wrong[:20])
    assert answers.statuses[503] > 0, f"no request met the outage: {answers.statuses}"
    assert api_500s(stack) == 0
    log.warning("answers during the failover: %s", dict(sorted(answers.statuses.items())))

    # Every accepted video completed, once; nothing refused was started.
    listed = listed_videos(http, answers)
    observations, _ = asyncio.run(_observe(stack, listed))
    report = check(history, observations)
    assert report.ok, f"seed={chaos_seed}\n{report.summary()}"
    assert len(history.acknowledged()) == VIDEOS, history.acknowledged()

    # Every CI run succeeded; each job in one attempt, its whole log, no gap.
    for run_id in run_ids:
        run = until_ok(http, "GET", f"/v1/runs/{run_id}", answers)
        assert run["status"] == "success", run
        for job in run["jobs"]:
            statuses = [a["status"] for a in job["attempts"]]
            assert statuses == ["success"], f"seed={chaos_seed} {run_id} {job['id']}: attempts {statuses}"
            lines, gaps = full_log(http, answers, run_id, job["id"])
            printed = [line for line in lines if line.startswith(f"{job['id']} ")]
            assert gaps == [], f"{run_id} {job['id']}: log gaps {gaps}"
            assert printed == [f"{job['id']} {i}" for i in range(1, LINES[job["id"]] + 1)], lines


async def _observe(stack: EmbeddedStack, listed: list[dict[str, Any]]) -> tuple[list[Observation], Any]:
    return await observe_videos(await connect(stack.settings()), stack.store(), listed)
