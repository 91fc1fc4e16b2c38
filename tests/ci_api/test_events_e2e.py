"""Webhook events besides push, end to end on real processes, with GitHub's own example
payloads (``@octokit/webhooks-examples``) pointed at a real repository: a ``labeled`` pull
request from a fork runs the ``types: [labeled]`` file without secrets and the base's
``pull_request_target`` file at the base commit with them; a ``published`` release runs at its
tag's commit; a merge queue's ``checks_requested`` runs its head; redeliveries add nothing."""

from __future__ import annotations

import json
import time
from functools import partial

from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import deliver, done_push, get_run, log_text, push_from_fork, wait_for, wait_run
from tests.gitrepo import git
from tests.webhook_examples import example, for_repository

LABELS = """
on:
  pull_request:
    types: [labeled]
jobs:
  label:
    runs-on: linux
    steps:
      - run: >-
          echo "event=${{ github.event_name }} action=${{ github.event.action }}
          label=${{ github.event.label.name }} sha=${{ github.sha }} secret=${{ secrets.TOKEN != '' }}"
"""
DEFAULT_PR = """
on: pull_request
jobs:
  test:
    runs-on: linux
    steps:
      - run: echo default types
"""
TARGET = """
on:
  pull_request_target:
    types: [labeled]
jobs:
  triage:
    runs-on: linux
    steps:
      - run: |
          echo "event=${{ github.event_name }} sha=${{ github.sha }} ref=${{ github.ref }}" \
            "secret=${{ secrets.TOKEN != '' }}"
          test ! -e evil.sh && echo "no fork code"
"""
RELEASE = """
on:
  release:
    types: [published]
jobs:
  publish:
    runs-on: linux
    steps:
      - run: echo "ref=${{ github.ref }} sha=${{ github.sha }} tag=${{ github.event.release.tag_name }}"
"""
MERGE_GROUP = """
on: merge_group
jobs:
  queue:
    runs-on: linux
    steps:
      - run: echo "ref=${{ github.ref }} sha=${{ github.sha }} base=${{ github.event.merge_group.base_ref }}"
"""


def _runs_of(client, answer: dict) -> list[dict]:  # type: ignore[no-untyped-def]
    """Every run the delivery's pushes made, once each push is listed."""
    runs: list[dict] = []
    for push in answer["pushes"]:
        done = wait_for("the push to be listed", partial(done_push, client, push["id"]))
        runs.extend(get_run(client, r["run_id"]) for r in done["runs"])
    return runs


def _setup(stack: CIStack, files: dict[str, str]):  # type: ignore[no-untyped-def]
    client = stack.new_tenant()
    remote = stack.git_remote()
    repo_id, name, secret = stack.register(client, remote)
    assert client.put("/v1/secrets/TOKEN", json={"value": "s3cret-value"}).status_code == 201
    for path, text in files.items():
        remote.write(f".github/workflows/{path}", text)
    base = remote.commit("workflows")
    remote.push()
    return client, remote, repo_id, name, secret, base


def test_a_labeled_pull_request_from_a_fork_and_its_target_run(ci_engine: CIStack) -> None:
    client, remote, repo_id, name, secret, base = _setup(
        ci_engine, {"labels.yml": LABELS, "ci.yml": DEFAULT_PR, "target.yml": TARGET}
    )
    head = push_from_fork(ci_engine, remote, repo_id, 7)
    payload = for_repository(example("pull_request", "labeled"), name)
    pr = payload["pull_request"]
    payload["number"] = pr["number"] = 7
    pr["head"]["sha"], pr["head"]["ref"], pr["head"]["repo"]["full_name"] = head, "feature", "mallory/fork"
    pr["base"]["sha"], pr["base"]["ref"] = base, "main"
    body = json.dumps(payload).encode()
    answer = deliver(ci_engine, secret, "pull_request", body)
    assert answer.status_code == 202, answer.text
    runs = {r["workflow_path"]: r for r in _runs_of(client, answer.json())}
    # Only the files whose filter takes a label: not the default types'.
    assert set(runs) == {".github/workflows/labels.yml", ".github/workflows/target.yml"}, runs

    labeled = wait_run(client, runs[".github/workflows/labels.yml"]["id"])
    assert labeled["status"] == "success" and labeled["commit_sha"] == head, labeled
    text = log_text(client, labeled["id"], "label")
    label = payload["label"]["name"]
    assert f"event=pull_request action=labeled label={label} sha={head} secret=false" in text, text

    target = wait_run(client, runs[".github/workflows/target.yml"]["id"])
    assert target["status"] == "success" and target["commit_sha"] == base, target
    text = log_text(client, target["id"], "triage")
    # The base's workflow at the base commit, with secrets; the fork's code is not checked out.
    assert f"event=pull_request_target sha={base} ref=refs/heads/main secret=true" in text, text
    assert "no fork code" in text and "s3cret-value" not in text

    # Delivered again: the same pushes, no new run.
    again = deliver(ci_engine, secret, "pull_request", body)
    assert [p["id"] for p in again.json()["pushes"]] == [p["id"] for p in answer.json()["pushes"]]
    assert {r["id"] for r in _runs_of(client, again.json())} == {r["id"] for r in runs.values()}


def test_a_published_release_runs_at_its_tag(ci_engine: CIStack) -> None:
    client, remote, _, name, secret, _ = _setup(ci_engine, {"release.yml": RELEASE})
    remote.write("CHANGELOG.md", "1.0\n")
    tagged = remote.commit("release 1.0")
    git(remote.work, "tag", "v1.0")
    remote.push("HEAD:refs/heads/main", "refs/tags/v1.0")
    payload = for_repository(example("release", "published"), name)
    payload["release"]["tag_name"] = "v1.0"
    answer = deliver(ci_engine, secret, "release", json.dumps(payload).encode())
    assert answer.status_code == 202, answer.text
    (run,) = _runs_of(client, answer.json())
    run = wait_run(client, run["id"])
    assert run["status"] == "success" and run["commit_sha"] == tagged, run
    assert f"ref=refs/tags/v1.0 sha={tagged} tag=v1.0" in log_text(client, run["id"], "publish")
    # Another activity type of the same release: the file asks only for published.
    payload["action"] = "created"
    created = deliver(ci_engine, secret, "release", json.dumps(payload).encode())
    assert _runs_of(client, created.json()) == []
    # A release whose tag the repository does not have fails its push, naming the tag.
    payload["release"]["tag_name"], payload["action"], payload["release"]["id"] = "v9", "published", 99
    missing = deliver(ci_engine, secret, "release", json.dumps(payload).encode())
    (push,) = missing.json()["pushes"]
    failed = wait_for(
        "the push to fail", lambda: (p := client.get(f"/v1/pushes/{push['id']}").json())["status"] == "failed" and p
    )
    assert "refs/tags/v9" in failed["error"], failed


def test_a_merge_group_runs_the_queue_head(ci_engine: CIStack) -> None:
    client, remote, _, name, secret, base = _setup(ci_engine, {"queue.yml": MERGE_GROUP})
    remote.write("merged.txt", "pr 104\n")
    head = remote.commit("merge queue head")
    queue_ref = "refs/heads/gh-readonly-queue/main/pr-104-929f8209d40f77f4abc622a499c93a83babdbe64"
    remote.push(f"HEAD:{queue_ref}")
    payload = for_repository(example("merge_group", "checks_requested"), name)
    payload["merge_group"].update(head_sha=head, head_ref=queue_ref, base_sha=base, base_ref="refs/heads/main")
    answer = deliver(ci_engine, secret, "merge_group", json.dumps(payload).encode())
    assert answer.status_code == 202, answer.text
    (run,) = _runs_of(client, answer.json())
    run = wait_run(client, run["id"])
    assert run["status"] == "success" and run["commit_sha"] == head, run
    assert f"ref={queue_ref} sha={head} base=refs/heads/main" in log_text(client, run["id"], "queue")


def test_event_payloads_missing_what_starts_a_run_are_400s_naming_the_field(ci_stack: CIStack) -> None:
    client = ci_stack.new_tenant()
    _, name, secret = ci_stack.register(client, ci_stack.git_remote(), hook=False)
    cases = [
        ("pull_request", lambda p: p["pull_request"]["head"].update(sha="nope"), "pull_request.head.sha"),
        ("merge_group", lambda p: p["merge_group"].update(head_ref="main"), "merge_group.head_ref"),
        ("merge_group", lambda p: p["merge_group"].pop("head_sha"), "merge_group.head_sha"),
    ]
    for event, spoil, param in cases:
        payload = for_repository(example(event), name)
        spoil(payload)
        answer = deliver(ci_stack, secret, event, json.dumps(payload).encode())
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["param"] == param
    payload = for_repository(example("release", "published"), name)
    payload["release"]["tag_name"] = "bad tag name"
    assert deliver(ci_stack, secret, "release", json.dumps(payload).encode()).status_code == 400


def _named(name: str, on: str, echo: str = "ran") -> str:
    return f'name: {name}\non:\n{on}\njobs:\n  j:\n    runs-on: linux\n    steps:\n      - run: echo "{echo}"\n'


def test_workflow_run_follows_a_run_and_stops_after_three_levels(ci_engine: CIStack) -> None:
    after_echo = (
        "event=${{ github.event_name }} action=${{ github.event.action }} of=${{ github.event.workflow_run.name }}"
        " conclusion=${{ github.event.workflow_run.conclusion }} branch=${{ github.event.workflow_run.head_branch }}"
        " sha=${{ github.sha }} ref=${{ github.ref }}"
    )
    files = {
        "ci.yml": _named("CI", "  push:"),
        "after.yml": _named("After", "  workflow_run:\n    workflows: [CI]\n    types: [completed]", after_echo),
        "requested.yml": _named("Requested", "  workflow_run:\n    workflows: ['C*']\n    types: [requested]"),
        "level2.yml": _named("L2", "  workflow_run:\n    workflows: [After]\n    types: [completed]"),
        "level3.yml": _named("L3", "  workflow_run:\n    workflows: [L2]\n    types: [completed]"),
        "level4.yml": _named("L4", "  workflow_run:\n    workflows: [L3]\n    types: [completed]"),
    }
    client, _, repo_id, _, _, head = _setup(ci_engine, files)

    def runs() -> dict[str, dict]:
        listed = client.get("/v1/runs", params={"repo": repo_id, "limit": 50}).json()["data"]
        return {r["workflow_path"].rsplit("/", 1)[-1]: get_run(client, r["id"]) for r in listed}

    done = wait_for(
        "the chain to level 3",
        lambda: (found := runs()).get("level3.yml", {}).get("status") in ("success", "failure") and found,
        timeout=180,
    )
    assert {name: r["event"] for name, r in done.items()} == {
        "ci.yml": "push",
        "requested.yml": "workflow_run",
        "after.yml": "workflow_run",
        "level2.yml": "workflow_run",
        "level3.yml": "workflow_run",
    }, done
    assert all(r["status"] == "success" for r in done.values()), done
    after = done["after.yml"]
    assert after["commit_sha"] == head
    text = log_text(client, after["id"], "j")
    assert (
        f"event=workflow_run action=completed of=CI conclusion=success branch=main sha={head} ref=refs/heads/main"
        in text
    ), text
    # A fourth level does not start (GitHub's limit), however long one waits.
    time.sleep(5)
    assert "level4.yml" not in runs()
