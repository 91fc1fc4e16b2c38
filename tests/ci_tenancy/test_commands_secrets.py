"""Workflow commands against real secrets, through the webhook: a job that stops command
processing, prints its secret in annotations (plainly and through GitHub's escapes) and in its
step summary still leaks it nowhere (log, annotations in the run state and the API, stored
summary), and the webhook's pusher is the job's ``github.actor``."""

from __future__ import annotations

import pytest

from actions_language.masking import secret_forms
from leasehold.storage import open_store
from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import get_run, job, log_text, push_workflow, wait_run
from workflows.ci.ids import attempt_log_prefix, step_summary_key

pytestmark = pytest.mark.slow

TOKEN = "cmd:tok,en-secret-8675309"
ESCAPED = TOKEN.replace(":", "%3A").replace(",", "%2C")

WORKFLOW = f"""
name: commands
on: push
jobs:
  leak:
    runs-on: linux
    env:
      TOKEN: ${{{{ secrets.CMD_TOKEN }}}}
    steps:
      - name: stop commands, then leak
        run: |
          echo "::stop-commands::letmeout"
          echo "plain $TOKEN"
          echo "::add-mask::$TOKEN"
          echo "::error::$TOKEN"
          echo "::letmeout::"
          echo "::error title=$TOKEN::$TOKEN"
          echo "::warning file={ESCAPED},title={ESCAPED}::{ESCAPED.replace(",", "%2C")}"
          echo "summary $TOKEN" >> "$GITHUB_STEP_SUMMARY"
          echo "actor=${{{{ github.actor }}}} pusher=${{{{ github.event.pusher.name }}}}"
"""


def test_stop_commands_annotations_and_summaries_never_show_a_secret(tenancy: CIStack) -> None:
    def store(client, repo_id) -> None:  # type: ignore[no-untyped-def]
        assert client.put("/v1/secrets/CMD_TOKEN", json={"value": TOKEN}).status_code == 201

    pushed = push_workflow(tenancy, WORKFLOW, before_push=store)
    run = wait_run(pushed.client, pushed.run_id)
    text = log_text(pushed.client, pushed.run_id, "leak")
    assert run["status"] == "success", text
    for form in secret_forms(TOKEN):
        assert form.decode() not in text, form
    assert "plain ***" in text and "actor=tester pusher=tester" in text

    leak = job(get_run(pushed.client, pushed.run_id), "leak")
    (attempt,) = [a for a in leak["attempts"] if a["attempt"] == leak["attempt"]]
    annotations = [a for step in attempt["steps"] for a in step["annotations"]]
    # The ::error:: while commands were stopped made none; the two after ::letmeout:: did.
    assert [(a["level"], a["message"], a["title"], a["file"]) for a in annotations] == [
        ("error", "***", "***", None),
        ("warning", "***", "***", "***"),
    ], annotations

    # The read model's rows of them (what outlives the engine) say the same, masked too.
    page = pushed.client.get(f"/v1/runs/{pushed.run_id}/jobs/leak/annotations").json()
    assert page["attempt"] == leak["attempt"] and not page["has_more"], page
    assert [(a["ordinal"], a["level"], a["message"], a["title"], a["file"]) for a in page["data"]] == [
        (1, "error", "***", "***", None),
        (2, "warning", "***", "***", "***"),
    ], page
    second = pushed.client.get(f"/v1/runs/{pushed.run_id}/jobs/leak/annotations", params={"after": 1, "limit": 1})
    assert [a["ordinal"] for a in second.json()["data"]] == [2], second.text
    assert pushed.client.get(f"/v1/runs/{pushed.run_id}/jobs/leak/annotations", params={"limit": 0}).status_code == 422

    tenant = pushed.client.tenant_id  # type: ignore[attr-defined]
    prefix = attempt_log_prefix(tenant, pushed.run_id, "leak", leak["attempt"])
    summary = open_store(tenancy.settings).get(step_summary_key(prefix)).decode()
    assert summary == "summary ***\n", summary
