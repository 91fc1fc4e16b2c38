"""End to end through the API: real ``git push`` -> signed webhook -> push -> runs executed by a
real CI worker, read, listed, cancelled, retried, and their logs replayed and tailed over SSE."""

from __future__ import annotations

import time

import pytest

from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import (
    WORKFLOW_PATH,
    done_push,
    get_run,
    job,
    log_text,
    push_workflow,
    sse_events,
    wait_for,
    wait_run,
)

pytestmark = pytest.mark.slow

CHAIN = """
name: chain
on:
  push:
    branches: [main]
jobs:
  build:
    runs-on: linux
    steps:
      - name: compile
        run: |
          echo "building ${{ github.sha }}"
          echo "artifact=app-42" >> "$GITHUB_OUTPUT"
  test:
    needs: build
    runs-on: linux
    steps:
      - run: echo "testing ${{ needs.build.outputs.artifact }}"
"""


def test_git_push_runs_a_chain_that_passes_and_only_its_tenant_sees_it(ci_engine: CIStack) -> None:
    pushed = push_workflow(ci_engine, CHAIN)
    client, rid = pushed.client, pushed.run_id
    run = wait_run(client, rid, timeout=90)
    assert run["status"] == "success", run
    assert (run["repo_id"], run["commit_sha"], run["ref"]) == (pushed.repo_id, pushed.sha, "refs/heads/main")
    build, test = job(run, "build"), job(run, "test")
    assert build["status"] == test["status"] == "success"
    assert build["exit_code"] == 0 and build["attempts"][0]["status"] == "success"
    assert build["finished_at"] <= test["started_at"], "test needs build"
    assert build["outputs"].get("artifact") == "app-42"
    assert f"building {pushed.sha}" in log_text(client, rid, "build")
    assert "testing app-42" in log_text(client, rid, "test")

    # Listed for its tenant (visibility is eventually consistent), filtered by repo and status.
    listed = wait_for(
        "the run in the list",
        lambda: [r for r in client.get("/v1/runs", params={"repo": pushed.repo_id}).json()["data"] if r["id"] == rid],
    )
    assert listed[0]["repo_id"] == pushed.repo_id and listed[0]["commit_sha"] == pushed.sha
    wait_for(
        "the run under status=success",
        lambda: rid in [r["id"] for r in client.get("/v1/runs", params={"status": "success"}).json()["data"]],
    )
    assert rid not in [r["id"] for r in client.get("/v1/runs", params={"status": "failure"}).json()["data"]]
    assert client.get("/v1/runs", params={"status": "bogus"}).status_code == 400

    # Another tenant: 404 everywhere, an empty list.
    other = ci_engine.new_tenant()
    for method, url in [
        ("GET", f"/v1/runs/{rid}"),
        ("GET", f"/v1/runs/{rid}/jobs/build/logs"),
        ("GET", f"/v1/runs/{rid}/jobs/build/logs/stream"),
        ("POST", f"/v1/runs/{rid}/cancel"),
        ("POST", f"/v1/runs/{rid}/jobs/build/retry"),
        ("GET", f"/v1/pushes/{pushed.push_id}"),
        ("GET", f"/v1/repos/{pushed.repo_id}"),
        ("GET", "/v1/runs?repo=" + pushed.repo_id),
    ]:
        assert other.request(method, url).status_code == 404, (method, url)
    assert rid not in [r["id"] for r in other.get("/v1/runs").json()["data"]]
    assert get_run(client, rid)["status"] == "success", "the other tenant's cancel changed nothing"
    assert client.get("/v1/runs/run_0000000000000000deadbeef").status_code == 404

    # Redelivery of the very same webhook (body and signature): the same push, still one run.
    (delivery,) = pushed.remote.deliveries()
    with ci_engine.anonymous() as anonymous:
        again = anonymous.post("/v1/hooks/github", content=delivery.body, headers=delivery.headers)
    assert again.status_code == 202 and again.json()["pushes"][0]["id"] == pushed.push_id
    # The same commit through the generic trigger too: runs are per repo + commit + file.
    generic = client.post(
        "/v1/hooks/push", json={"repo_id": pushed.repo_id, "commit_sha": pushed.sha, "ref": "refs/heads/main"}
    )
    assert generic.status_code == 202 and generic.json()["id"] == pushed.push_id
    time.sleep(1.0)  # give a wrongly created second run the time to show up in visibility
    runs = client.get("/v1/runs", params={"repo": pushed.repo_id}).json()["data"]
    assert [r["id"] for r in runs] == [rid]
    assert get_run(client, rid)["jobs"][0]["attempts"][0]["attempt"] == 1
    assert len(job(get_run(client, rid), "build")["attempts"]) == 1

    # github.run_number, as the run and the listing show it: the file's first run is 1 (the
    # redeliveries made no new number), the next commit's run of the same file is 2.
    assert get_run(client, rid)["run_number"] == 1
    pushed.remote.write(WORKFLOW_PATH, CHAIN + "# again\n")
    sha2 = pushed.remote.commit("again")
    pushed.remote.push()

    def numbered() -> dict[str, tuple[str, int | None]]:
        listed = client.get("/v1/runs", params={"repo": pushed.repo_id}).json()["data"]
        return {r["commit_sha"]: (r["id"], r["run_number"]) for r in listed}

    runs_by_sha = wait_for("the second commit's run", lambda: sha2 in (n := numbered()) and n)
    rid2 = runs_by_sha[sha2][0]
    assert runs_by_sha == {pushed.sha: (rid, 1), sha2: (rid2, 2)}
    assert wait_run(client, rid2, timeout=90)["run_number"] == 2
    assert other.get(f"/v1/runs/{rid2}").status_code == 404


UNSUPPORTED = """
name: unsupported
on: push
jobs:
  build:
    runs-on: linux
    steps:
      - uses: docker://node:20
"""


def test_unsupported_keys_create_a_run_that_fails_with_the_reason(ci_engine: CIStack) -> None:
    client = ci_engine.new_tenant()
    remote = ci_engine.git_remote()
    repo_id, _, _ = ci_engine.register(client, remote, hook=False)
    remote.write(WORKFLOW_PATH, UNSUPPORTED)
    sha = remote.commit("bad workflow")
    remote.push()
    # No webhook here: the generic, API-key authenticated trigger.
    accepted = client.post("/v1/hooks/push", json={"repo_id": repo_id, "commit_sha": sha, "ref": "refs/heads/main"})
    assert accepted.status_code == 202, accepted.text
    push = wait_for("the push", lambda: done_push(client, accepted.json()["id"]))
    rid = push["runs"][0]["run_id"]
    run = wait_run(client, rid, timeout=90)
    assert run["status"] == "failure"
    assert WORKFLOW_PATH in run["error"] and "uses" in run["error"], run["error"]


SLOW = """
name: slow
on: push
jobs:
  slow:
    runs-on: linux
    steps:
      - run: |
          echo started
          sleep 120
          echo never-printed
  after:
    needs: slow
    runs-on: linux
    steps:
      - run: echo after
  cleanup:
    needs: slow
    if: always()
    runs-on: linux
    steps:
      - run: echo cleaning up
"""


def test_cancel_mid_job_through_the_api(ci_engine: CIStack) -> None:
    pushed = push_workflow(ci_engine, SLOW)
    client, rid = pushed.client, pushed.run_id
    wait_for("the slow job to print", lambda: "started" in log_text(client, rid, "slow"), timeout=60)
    cancelled = client.post(f"/v1/runs/{rid}/cancel")
    assert cancelled.status_code == 202, cancelled.text
    run = wait_run(client, rid, timeout=60)
    assert run["status"] == "cancelled", run
    slow = job(run, "slow")
    assert slow["status"] == "cancelled" and slow["attempts"][-1]["status"] == "cancelled"
    assert job(run, "after")["status"] in ("cancelled", "skipped")
    assert job(run, "cleanup")["status"] == "success", "if: always() jobs still run"
    assert "never-printed" not in log_text(client, rid, "slow")
    # Cancelling again is harmless.
    assert client.post(f"/v1/runs/{rid}/cancel").status_code == 202
    assert get_run(client, rid)["status"] == "cancelled"


FLAKY = """
name: flaky
on: push
jobs:
  flaky:
    runs-on: linux
    steps:
      - run: |
          echo "attempt $CI_ATTEMPT key $CI_IDEMPOTENCY_KEY"
          test "$CI_ATTEMPT" -ge 2
  deploy:
    needs: flaky
    runs-on: linux
    steps:
      - run: echo deployed
"""


def test_retry_a_failed_job_through_the_api(ci_engine: CIStack) -> None:
    pushed = push_workflow(ci_engine, FLAKY)
    client, rid = pushed.client, pushed.run_id
    run = wait_run(client, rid, timeout=90)
    assert run["status"] == "failure", run
    flaky = job(run, "flaky")
    assert flaky["status"] == "failure" and flaky["exit_code"] == 1
    assert job(run, "deploy")["status"] != "success", "a failing job stops its dependents"

    # Only failed (or cancelled) jobs can be retried; unknown jobs are 404.
    assert client.post(f"/v1/runs/{rid}/jobs/nope/retry").status_code == 404
    retry = client.post(f"/v1/runs/{rid}/jobs/flaky/retry")
    assert retry.status_code == 202, retry.text
    assert set(retry.json()["reset_jobs"]) >= {"flaky", "deploy"}
    run = wait_for(
        "the retried run to succeed", lambda: (r := get_run(client, rid))["status"] == "success" and r, timeout=90
    )
    flaky = job(run, "flaky")
    assert [a["status"] for a in flaky["attempts"]] == ["failure", "success"]
    assert flaky["attempt"] == flaky["attempts"][-1]["attempt"] > flaky["attempts"][0]["attempt"]
    assert job(run, "deploy")["status"] == "success"
    # Each attempt's log stays separate; the idempotency key is the same on both.
    first, second = (log_text(client, rid, "flaky", a["attempt"]) for a in flaky["attempts"])
    assert f"attempt {flaky['attempts'][0]['attempt']} key {rid}/flaky" in first
    assert f"attempt {flaky['attempts'][1]['attempt']} key {rid}/flaky" in second
    assert client.get(f"/v1/runs/{rid}/jobs/flaky/logs", params={"attempt": 99}).status_code == 404
    refused = client.post(f"/v1/runs/{rid}/jobs/flaky/retry")
    assert refused.status_code == 409, refused.text


STREAM = """
name: stream
on: push
jobs:
  talk:
    runs-on: linux
    steps:
      - run: |
          for i in $(seq 1 16); do echo "line-$i"; sleep 0.4; done
"""


def test_logs_live_tail_reconnect_and_replay(ci_engine: CIStack) -> None:
    pushed = push_workflow(ci_engine, STREAM)
    client, rid = pushed.client, pushed.run_id
    url = f"/v1/runs/{rid}/jobs/talk/logs/stream"
    # Opened before (or as) the job starts: the stream waits for the attempt, then follows it.
    first = sse_events(client, url, stop_after=2)
    # Before its first line, a job not started yet says what it waits for (no id: not a chunk).
    waiting = [e for e in first if e[1] == "waiting"]
    assert all(e[0] is None and e[2]["message"] for e in waiting), waiting
    first = first[len(waiting) :]
    assert [kind for _, kind, _ in first] == ["log", "log"]
    assert get_run(client, rid)["status"] != "success", "the first events arrived while the job ran"
    last_id = first[-1][0]
    assert last_id is not None
    rest = sse_events(client, url, headers={"Last-Event-ID": last_id})
    assert rest[-1][1] == "end" and rest[-1][2]["status"] == "success"
    logs = [e for e in first + rest if e[1] in ("log", "gap")]
    seqs = [int(e[0]) for e in logs if e[0] is not None]
    assert seqs == list(range(len(seqs))), "every seq once, in order, across the reconnect"
    streamed = "".join(d["text"] for _, kind, d in logs if kind == "log")
    assert [line for line in streamed.splitlines() if line.startswith("line-")] == [f"line-{i}" for i in range(1, 17)]

    # Replay: the stored chunks equal what was streamed; from_seq skips what a client has.
    page = client.get(f"/v1/runs/{rid}/jobs/talk/logs").json()
    assert page["ended"] and page["gaps"] == [] and page["next_seq"] == len(seqs)
    assert "".join(c["text"] for c in page["chunks"]) == streamed
    tail = client.get(f"/v1/runs/{rid}/jobs/talk/logs", params={"from_seq": 2}).json()
    assert [c["seq"] for c in tail["chunks"]] == seqs[2:]
    # A finished attempt replays over SSE from from_seq and ends at once.
    replay = sse_events(client, f"{url}?from_seq=1")
    assert [e[2]["seq"] for e in replay if e[1] == "log"] == seqs[1:] and replay[-1][1] == "end"
