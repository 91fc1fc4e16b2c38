"""The secrets broker (seed §6.4): a CI worker holds no key that opens secrets; it trades the
token its attempt was granted at the API, which answers only while that attempt holds the
job's lease, only with the secrets the job declares, and only from the run's own tenant. Also:
code from a fork never gets network, whatever its tenant's plan.

Played against the real stack (API, orchestration and CI worker processes, real bubblewrap):
the test takes an attempt's token from the run's Temporal history, as someone who can read
the engine could, and tries what an attacker would do with it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from activities.ci.secrets import JOB_SECRETS_PATH
from leasehold.database import init_database
from leasehold.records.ci.plans import set_network
from tests.ci_api.conftest import CIStack, running_ci_stack
from tests.ci_api.flows import (
    deliver,
    job,
    log_text,
    pull_request_payload,
    push_from_fork,
    push_workflow,
    runs_of_push,
    wait_for,
    wait_run,
)
from workflows.ci.ids import run_workflow_id

pytestmark = pytest.mark.slow

DECLARED = "declared-secret-value-4242"
UNDECLARED = "undeclared-secret-value-9090"

HOLDS_THE_LEASE = """
name: broker
on: push
jobs:
  hold:
    runs-on: linux
    env:
      TOKEN: ${{ secrets.DECLARED }}
    steps:
      - run: |
          test -n "$TOKEN"
          for i in $(seq 1 40); do [ -e /ci/work/never ] && break; sleep 0.25; done
          echo held
"""


@pytest.fixture(scope="module")
def broker_stack(temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CIStack]:
    with running_ci_stack(temporal_env, tmp_path_factory.mktemp("broker")) as stack:
        stack.start_workers()
        yield stack


async def granted_token(env: WorkflowEnvironment, run: str) -> tuple[int, str]:
    """The (attempt, token) the run workflow granted last, read from its history."""
    history = await env.client.get_workflow_handle(run_workflow_id(run)).fetch_history()
    found: tuple[int, str] | None = None
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
            outcome = event.workflow_execution_update_completed_event_attributes.outcome
            for payload in outcome.success.payloads:
                grant = json.loads(payload.data)
                if grant.get("secrets_token"):
                    found = (grant["attempt"], grant["secrets_token"])
    assert found is not None, "no attempt was granted a token"
    return found


def claim(stack: CIStack, token: str, run: str, attempt: int, names: list[str]) -> httpx.Response:
    return httpx.post(
        f"{stack.base_url}{JOB_SECRETS_PATH}",
        json={"run_id": run, "job_id": "hold", "attempt": attempt, "names": names},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


async def test_a_token_opens_only_its_jobs_declared_secrets_and_only_during_its_lease(
    broker_stack: CIStack, temporal_env: WorkflowEnvironment
) -> None:
    def store(client: httpx.Client, repo_id: str) -> None:
        assert client.put("/v1/secrets/DECLARED", json={"value": DECLARED}).status_code == 201
        assert client.put("/v1/secrets/UNDECLARED", json={"value": UNDECLARED}).status_code == 201

    pushed = push_workflow(broker_stack, HOLDS_THE_LEASE, before_push=store)
    wait_for(
        "the job to run",
        lambda: job(pushed.client.get(f"/v1/runs/{pushed.run_id}").json(), "hold")["status"] == "in_progress" or None,
    )
    attempt, token = await granted_token(temporal_env, pushed.run_id)

    # While the attempt runs: the declared secret, and nothing the job did not declare.
    answer = claim(broker_stack, token, pushed.run_id, attempt, ["DECLARED", "UNDECLARED"])
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"secrets": {"DECLARED": DECLARED}}
    # The token is for this attempt of this job of this run only.
    assert claim(broker_stack, token, pushed.run_id, attempt + 1, ["DECLARED"]).status_code == 404
    assert (
        claim(
            broker_stack, token[:-1] + ("0" if token[-1] != "0" else "1"), pushed.run_id, attempt, ["DECLARED"]
        ).status_code
        == 404
    )
    other = push_workflow(
        broker_stack, "on: push\njobs:\n  hold:\n    runs-on: linux\n    steps:\n      - run: sleep 1\n"
    )
    assert claim(broker_stack, token, other.run_id, attempt, ["DECLARED"]).status_code == 404

    run = wait_run(pushed.client, pushed.run_id)
    assert run["status"] == "success", run
    # The lease is over: the same token opens nothing any more.
    after = claim(broker_stack, token, pushed.run_id, attempt, ["DECLARED"])
    assert after.status_code == 404, after.text
    assert DECLARED not in after.text


FORK_WANTS_NETWORK = """
name: fork
on: [push, pull_request]
jobs:
  net:
    runs-on: linux
    network: true
    steps:
      - run: echo "RAN-WITH-NETWORK"
"""


def test_a_fork_pull_request_gets_no_network_even_with_the_tenants_grant(broker_stack: CIStack) -> None:
    client = broker_stack.new_tenant()
    tenant = client.tenant_id  # type: ignore[attr-defined]
    set_network(init_database(broker_stack.settings.resolved_database_url), tenant, True)
    remote = broker_stack.git_remote()
    repo_id, name, secret = broker_stack.register(client, remote, hook=False)
    remote.write(".github/workflows/ci.yml", FORK_WANTS_NETWORK)
    remote.commit("base")
    remote.push()
    head = push_from_fork(broker_stack, remote, repo_id, 9)
    answer = deliver(broker_stack, secret, "pull_request", pull_request_payload(9, head, "mallory/fork", name))
    assert answer.status_code == 202, answer.text
    (rid,) = runs_of_push(client, answer.text)
    run = wait_run(client, rid)
    assert run["status"] == "failure", run
    text = log_text(client, rid, "net")
    assert "network: true is never allowed for code from a fork" in text, text
    assert "RAN-WITH-NETWORK" not in text


def test_guessing_tokens_is_throttled(broker_stack: CIStack) -> None:
    codes = []
    deadline = time.monotonic() + 60
    for i in range(60):
        assert time.monotonic() < deadline
        codes.append(claim(broker_stack, f"guess-{i:04d}", "run_" + "0" * 24, 1, ["X"]).status_code)
        if codes[-1] == 429:
            break
    assert set(codes[:-1]) == {404}, codes
    assert codes[-1] == 429, codes
