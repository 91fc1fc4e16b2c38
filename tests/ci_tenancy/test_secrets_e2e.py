"""Secrets end to end: stored through the API, used by a real job in bubblewrap, masked in every
form in stored and streamed logs, absent from Temporal history, withheld from fork pull requests."""

from __future__ import annotations

import hashlib
import json

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from actions_language.masking import secret_forms
from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import (
    deliver,
    get_run,
    job,
    log_text,
    pull_request_payload,
    push_from_fork,
    push_workflow,
    runs_of_push,
    sse_text,
    wait_run,
)
from workflows.ci.ids import push_workflow_id, run_workflow_id

pytestmark = pytest.mark.slow

TOKEN = "Tok/en+&val\\ue-1234567890XYZ"
MULTI = "-----BEGIN TEST-----\nline-one-AAAA-1111\nline-two-BBBB-2222\n-----END TEST-----"
REPO_ONLY = "repository-scoped-value-5150"
RUNTIME = "runtime-only-value-77"
TOKEN_SHA = hashlib.sha256(TOKEN.encode()).hexdigest()

LEAKY = f"""
name: secrets
on: [push, pull_request]
env:
  WF_TOKEN: ${{{{ secrets.api_token }}}}
jobs:
  use:
    runs-on: linux
    outputs:
      leak: ${{{{ steps.out.outputs.leak }}}}
      fine: ${{{{ steps.out.outputs.fine }}}}
    env:
      TOKEN: ${{{{ secrets.API_TOKEN }}}}
      CERT: ${{{{ secrets.MULTI }}}}
    steps:
      - name: the value arrives
        run: |
          test "$(printf '%s' "$TOKEN" | sha256sum | cut -d' ' -f1)" = "{TOKEN_SHA}"
          test "$WF_TOKEN" = "$TOKEN"
      - name: leak it every way
        run: |
          echo "plain: $TOKEN"
          echo "inline: ${{{{ secrets.API_TOKEN }}}}"
          printf '%s' "$TOKEN" | base64 -w0; echo
          printf 'x%s' "$TOKEN" | base64 -w0; echo
          printf 'xy%s' "$TOKEN" | base64 -w0; echo
          python3 -c 'import os, urllib.parse; print(urllib.parse.quote(os.environ["TOKEN"], safe=""))'
          python3 -c 'import os, json; print(json.dumps({{"t": os.environ["TOKEN"]}}))'
          printf 'split: %s' "${{TOKEN:0:10}}"; sleep 1.2; printf '%s\\n' "${{TOKEN:10}}"
          echo "$CERT"
          echo "::add-mask::{RUNTIME}"
          echo "later: {RUNTIME}"
          echo "repo scoped: ${{{{ secrets.REPO_ONLY }}}}"
          echo "missing: [${{{{ secrets.NOT_SET }}}}]"
      - name: an output holding a secret
        id: out
        run: |
          echo "leak=$TOKEN" >> "$GITHUB_OUTPUT"
          echo "fine=plain-output" >> "$GITHUB_OUTPUT"
"""

FORK = """
name: fork
on: [push, pull_request]
jobs:
  check:
    runs-on: linux
    env:
      TOKEN: ${{ secrets.API_TOKEN }}
    steps:
      - run: |
          echo "event=$GITHUB_EVENT_NAME token-length=${#TOKEN}"
          test -z "$TOKEN"
"""


def store_secrets(client: httpx.Client, repo_id: str) -> None:
    for name, value in (("API_TOKEN", TOKEN), ("MULTI", MULTI)):
        assert client.put(f"/v1/secrets/{name}", json={"value": value}).status_code == 201
    assert client.put(f"/v1/repos/{repo_id}/secrets/REPO_ONLY", json={"value": REPO_ONLY}).status_code == 201


def assert_clean(text: str) -> None:
    for value in (TOKEN, MULTI, REPO_ONLY, RUNTIME):
        for form in secret_forms(value):
            assert form.decode(errors="replace") not in text, (value, form)
    assert "line-one-AAAA-1111" not in text and "line-two-BBBB-2222" not in text


async def history_bytes(env: WorkflowEnvironment, workflow_id: str) -> bytes:
    history = await env.client.get_workflow_handle(workflow_id).fetch_history()
    return b"".join(event.SerializeToString() for event in history.events)


async def test_secrets_reach_the_job_and_never_the_log_or_history(
    tenancy: CIStack, temporal_env: WorkflowEnvironment
) -> None:
    pushed = push_workflow(tenancy, LEAKY, before_push=store_secrets)
    run = wait_run(pushed.client, pushed.run_id)
    use = job(run, "use")
    assert run["status"] == "success", (run, log_text(pushed.client, pushed.run_id, "use"))
    assert run["secrets_allowed"] is True and run["notice"] is None
    # An output that holds a secret never reaches the run state (nor history, nor the API).
    assert use["outputs"] == {"fine": "plain-output"}

    stored = log_text(pushed.client, pushed.run_id, "use")
    streamed = sse_text(pushed.client, pushed.run_id, "use")
    for text in (stored, streamed):
        assert_clean(text)
        assert "plain: ***" in text and "inline: ***" in text
        assert "split: ***" in text
        assert "::add-mask::***" in text and "later: ***" in text
        assert "repo scoped: ***" in text
        assert "missing: []" in text and "secrets not set (empty): NOT_SET" in text
        assert "output leak skipped" in text
        assert text.count("***") >= 12

    # Temporal carries names, never values: not in the run's history nor its push's.
    for wid in (
        run_workflow_id(pushed.run_id),
        push_workflow_id(json.loads(pushed.remote.deliveries()[-1].answer)["pushes"][0]["id"]),
    ):
        data = await history_bytes(temporal_env, wid)
        assert b"API_TOKEN" in data or wid.startswith("ci-push:")
        for value in (TOKEN, MULTI, REPO_ONLY):
            for form in secret_forms(value):
                assert form not in data, (wid, form)


def test_fork_pull_request_runs_without_secrets(tenancy: CIStack) -> None:
    client = tenancy.new_tenant()
    remote = tenancy.git_remote()
    repo_id, name, secret = tenancy.register(client, remote, hook=False)
    assert client.put("/v1/secrets/API_TOKEN", json={"value": TOKEN}).status_code == 201
    remote.write(".github/workflows/ci.yml", FORK)
    remote.commit("base")
    remote.push()
    head = push_from_fork(tenancy, remote, repo_id, 7)

    answer = deliver(tenancy, secret, "pull_request", pull_request_payload(7, head, "mallory/fork", name))
    assert answer.status_code == 202, answer.text
    (rid,) = runs_of_push(client, answer.text)
    run = wait_run(client, rid)
    assert run["status"] == "success", log_text(client, rid, "check")
    assert run["event"] == "pull_request" and run["commit_sha"] == head
    assert run["secrets_allowed"] is False and "fork" in run["notice"]
    assert run["pull_request"]["head_repo"] == "mallory/fork"
    text = log_text(client, rid, "check")
    assert "event=pull_request token-length=0" in text
    assert "secrets are not available" in text

    # The same delivery again creates nothing new; an action the file does not ask for
    # (``closed``: not among the default types) is its own push, and starts no run.
    again = deliver(tenancy, secret, "pull_request", pull_request_payload(7, head, "mallory/fork", name))
    assert runs_of_push(client, again.text) == [rid]
    closed = json.loads(pull_request_payload(7, head, "mallory/fork", name))
    closed["action"] = "closed"
    answer = deliver(tenancy, secret, "pull_request", json.dumps(closed).encode())
    assert answer.status_code == 202 and answer.json()["status"] == "accepted"
    assert runs_of_push(client, answer.text) == []
    assert get_run(client, rid)["status"] == "success"
