"""Triggers end to end on real processes: ``paths`` filters over what a real ``git push`` changed
(its webhook's ``before``), and ``workflow_dispatch`` through the API with inputs checked
against the file, its step summary served back, and other tenants kept out."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx

from testing.harness import REPO_ROOT
from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import done_push, job, log_text, wait_for, wait_run

JOB = """
jobs:
  a:
    runs-on: linux
    steps:
      - run: echo ran
"""


def _listed(client: httpx.Client, answer: str) -> dict:
    pid = json.loads(answer)["pushes"][0]["id"]
    return wait_for("the push to be listed", lambda: done_push(client, pid))


def _names(paths: list[str]) -> list[str]:
    return sorted(p.rsplit("/", 1)[-1] for p in paths)


def test_paths_filters_follow_what_the_push_changed(ci_engine: CIStack) -> None:
    client = ci_engine.new_tenant()
    remote = ci_engine.git_remote()
    ci_engine.register(client, remote)
    remote.write(".github/workflows/src.yml", "on:\n  push:\n    paths: ['src/**']\n" + JOB)
    remote.write(".github/workflows/not-src.yml", "on:\n  push:\n    paths-ignore: ['src/**']\n" + JOB)
    remote.write(
        ".github/workflows/main-and-src.yml", "on:\n  push:\n    branches: [main]\n    paths: ['src/**']\n" + JOB
    )
    remote.write("src/app.py", "1\n")
    remote.write("docs/guide.md", "1\n")
    remote.commit("first")
    remote.push()
    # A new branch (before = zeros): the commit against its parent, here every file.
    first = _listed(client, remote.deliveries()[0].answer)
    assert _names([r["workflow_path"] for r in first["runs"]]) == ["main-and-src.yml", "not-src.yml", "src.yml"]

    remote.write("docs/guide.md", "2\n")
    remote.commit("docs only")
    remote.push()
    docs = _listed(client, remote.deliveries()[1].answer)
    assert _names([r["workflow_path"] for r in docs["runs"]]) == ["not-src.yml"], docs
    assert _names(docs["not_triggered"]) == ["main-and-src.yml", "src.yml"]
    run = wait_run(client, docs["runs"][0]["run_id"])
    assert run["status"] == "success", run

    # Two commits in one push: the diff is before..after, not just the last commit.
    remote.write("src/app.py", "2\n")
    remote.commit("src")
    remote.write("docs/guide.md", "3\n")
    remote.commit("docs again")
    remote.push()
    both = _listed(client, remote.deliveries()[2].answer)
    assert _names([r["workflow_path"] for r in both["runs"]]) == ["main-and-src.yml", "not-src.yml", "src.yml"]

    # The branch filter must match too: src changes on another branch run only src.yml.
    remote.write("src/app.py", "3\n")
    remote.commit("src on dev")
    remote.push("HEAD:refs/heads/dev")
    dev = _listed(client, remote.deliveries()[3].answer)
    assert _names([r["workflow_path"] for r in dev["runs"]]) == ["src.yml"], dev

    # Tags ignore path filters, as on GitHub.
    remote.push("HEAD:refs/tags/v1")
    tag = _listed(client, remote.deliveries()[4].answer)
    assert _names([r["workflow_path"] for r in tag["runs"]]) == ["not-src.yml", "src.yml"], tag


DISPATCHED = """
on:
  workflow_dispatch:
    inputs:
      x:
        required: true
      flag:
        type: boolean
        default: false
      level:
        type: choice
        options: [low, high]
        default: low
      n:
        type: number
        default: 2
jobs:
  a:
    runs-on: linux
    if: inputs.flag
    steps:
      - run: |
          echo "x=${{ inputs.x }} flag=${{ inputs.flag }} level=${{ inputs.level }} n=${{ inputs.n }}"
          echo "event=${{ github.event.inputs.x }} name=${{ github.event_name }} ref=${{ github.ref }}"
          echo "number=${{ github.run_number }}/$GITHUB_RUN_NUMBER"
          echo "## Deployed ${{ inputs.x }}" >> "$GITHUB_STEP_SUMMARY"
  off:
    runs-on: linux
    if: ${{ !inputs.flag }}
    steps:
      - run: echo never
"""


def _dispatch(client: httpx.Client, repo_id: str, body: dict, key: str | None = None) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return client.post(f"/v1/repos/{repo_id}/dispatches", json=body, headers=headers, timeout=60)


def test_workflow_dispatch_with_inputs_runs_and_serves_its_summary(ci_engine: CIStack) -> None:
    client = ci_engine.new_tenant()
    remote = ci_engine.git_remote()
    repo_id, _, _ = ci_engine.register(client, remote)
    remote.write(".github/workflows/deploy.yml", DISPATCHED)
    remote.write(".github/workflows/push-only.yml", "on: push\n" + JOB)
    sha = remote.commit("dispatchable")
    remote.push()

    body = {"workflow": "deploy.yml", "ref": "main", "inputs": {"x": "hello", "flag": True, "level": "high"}}
    answer = _dispatch(client, repo_id, body)
    assert answer.status_code == 201, answer.text
    (created,) = answer.json()["runs"]
    assert created["workflow_path"] == ".github/workflows/deploy.yml"
    run = wait_run(client, created["id"])
    assert run["status"] == "success", json.dumps(run)[:3000]
    assert run["commit_sha"] == sha and run["ref"] == "refs/heads/main"
    assert job(run, "off")["status"] == "skipped"
    text = log_text(client, created["id"], "a")
    assert "x=hello flag=true level=high n=2" in text, text
    assert "event=hello name=workflow_dispatch ref=refs/heads/main" in text, text
    assert "number=1/1" in text, text

    summary = client.get(f"/v1/runs/{created['id']}/jobs/a/summary")
    assert summary.status_code == 200, summary.text
    assert summary.headers["content-type"] == "text/markdown; charset=utf-8"
    assert summary.headers["x-content-type-options"] == "nosniff"
    assert summary.text.strip() == "## Deployed hello"
    assert client.get(f"/v1/runs/{created['id']}/jobs/a/summary", params={"attempt": 2}).status_code == 404
    nothing = client.get(f"/v1/runs/{created['id']}/jobs/off/summary")
    assert (nothing.status_code, nothing.json()["error"]["message"]) == (404, "no step summary")

    # Another tenant: neither the summary nor the repository exists for it.
    other = ci_engine.new_tenant()
    assert other.get(f"/v1/runs/{created['id']}/jobs/a/summary").status_code == 404
    assert _dispatch(other, repo_id, body).status_code == 404

    # Every dispatch is a new run (as on GitHub); an Idempotency-Key makes a retry the same one.
    again = _dispatch(client, repo_id, body)
    assert again.status_code == 201 and again.json()["runs"][0]["id"] != created["id"]
    # ... with the workflow's next run number.
    second = again.json()["runs"][0]["id"]
    assert wait_run(client, second)["status"] == "success"
    assert "number=2/2" in log_text(client, second, "a")
    keyed = _dispatch(client, repo_id, body, key="deploy-1")
    same = _dispatch(client, repo_id, body, key="deploy-1")
    assert keyed.status_code == same.status_code == 201, (keyed.text, same.text)
    assert keyed.json()["runs"] == same.json()["runs"]
    conflict = _dispatch(client, repo_id, {**body, "inputs": {"x": "other"}}, key="deploy-1")
    assert (conflict.status_code, conflict.json()["error"]["param"]) == (409, "Idempotency-Key")


def test_bad_dispatches_name_the_field(ci_engine: CIStack) -> None:
    client = ci_engine.new_tenant()
    remote = ci_engine.git_remote()
    repo_id, _, _ = ci_engine.register(client, remote)
    remote.write(".github/workflows/deploy.yml", DISPATCHED)
    remote.write(".github/workflows/push-only.yml", "on: push\n" + JOB)
    remote.commit("dispatchable")
    remote.push()

    good = {"workflow": ".github/workflows/deploy.yml", "ref": "refs/heads/main", "inputs": {"x": "1"}}
    refused_here = [
        ({**good, "workflow": "../../etc/passwd.yml"}, "workflow"),
        ({**good, "ref": "main..dev"}, "ref"),
        ({**good, "ref": "--upload-pack=x"}, "ref"),
        ({**good, "inputs": {"1bad": "x"}}, "inputs.1bad"),
        ({**good, "inputs": {"x": {"nested": 1}}}, "inputs.x"),
        ({**good, "inputs": {f"i{n}": "v" for n in range(26)}}, "inputs"),
        ({**good, "inputs": {"x": "v" * 70_000}}, "inputs"),
    ]
    for body, field in refused_here:
        answer = _dispatch(client, repo_id, body)
        assert (answer.status_code, answer.json()["error"]["param"]) == (400, field), (body, answer.text)

    refused_by_the_file = [
        ({**good, "inputs": {}}, "inputs.x", "required"),
        ({**good, "inputs": {"x": "1", "level": "mid"}}, "inputs.level", "low, high"),
        ({**good, "inputs": {"x": "1", "flag": "maybe"}}, "inputs.flag", "true or false"),
        ({**good, "inputs": {"x": "1", "n": "many"}}, "inputs.n", "number"),
        ({**good, "inputs": {"x": "1", "y": "2"}}, "inputs.y", "not an input"),
        ({**good, "ref": "nope"}, "ref", "no branch or tag"),
        ({**good, "workflow": "missing.yml"}, "workflow", "no workflow file"),
        ({**good, "workflow": "push-only.yml"}, "workflow", "no 'workflow_dispatch' trigger"),
    ]
    for body, field, words in refused_by_the_file:
        answer = _dispatch(client, repo_id, body)
        error = answer.json()["error"]
        assert (answer.status_code, error["param"]) == (422, field), (body, answer.text)
        assert words in error["message"], error


def test_the_cli_dispatches_through_the_api(ci_engine: CIStack) -> None:
    client = ci_engine.new_tenant()
    remote = ci_engine.git_remote()
    repo_id, _, _ = ci_engine.register(client, remote)
    remote.write(".github/workflows/deploy.yml", DISPATCHED)
    remote.commit("dispatchable")
    remote.push()
    key = client.headers["Authorization"].removeprefix("Bearer ")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "cli.main", "ci", "dispatch", repo_id, "deploy.yml", *args]
        env = {"PATH": os.environ.get("PATH", ""), "LEASEHOLD_API_KEY": key}
        base = ["--api-url", ci_engine.base_url]
        return subprocess.run([*command, *base], capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120)

    bad = cli("-f", "x=1", "-f", "level=mid")
    assert bad.returncode == 2 and "(inputs.level)" in bad.stderr, bad
    good = cli("-f", "x=from-cli", "-F", "flag=true")
    assert good.returncode == 0, good
    (created,) = json.loads(good.stdout)["runs"]
    run = wait_run(client, created["id"])
    assert run["status"] == "success"
    assert "x=from-cli flag=true" in log_text(client, created["id"], "a")
