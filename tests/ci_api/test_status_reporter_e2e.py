"""Run status on the git host, end to end on real processes: a repository's reporter set
through the API (a GitHub App), a real push through the webhook, and the orchestration worker
posting to the OpenAPI-validated GitHub stand-in a ``pending`` commit status, the final one
with the console's run page, and one check run per job with its annotation; a redelivered
webhook posts nothing more; another tenant gets 404; bad settings name their field."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import deliver, job, push_workflow, wait_for, wait_run
from tests.github_standin import Description, GitHubStandIn, description_path, new_app

WORKFLOW = """
name: Checks
on: push
jobs:
  build:
    runs-on: linux
    steps:
      - run: echo built
  lint:
    needs: build
    runs-on: linux
    steps:
      - run: |
          echo "::error file=src/app.py,line=3,title=style::line too long"
          exit 1
"""


@pytest.fixture(scope="module")
def github() -> Iterator[GitHubStandIn]:
    standin = GitHubStandIn(Description(description_path()))
    server = standin.serve()
    yield standin
    server.shutdown()
    assert standin.violations == [], standin.violations


def test_a_run_reports_its_status_and_check_runs_to_the_git_host(ci_engine: CIStack, github: GitHubStandIn) -> None:
    app = new_app(app_id="9001", installation_id="31337")
    github.apps[app.installation_id] = app
    names: dict[str, str] = {}

    def configure(client, repo_id: str) -> None:  # type: ignore[no-untyped-def]
        repo = client.get(f"/v1/repos/{repo_id}").json()["name"]
        names["repo"] = repo
        github.app_repos[app.installation_id] = {repo.lower()}
        answer = client.put(
            f"/v1/repos/{repo_id}/status-reporter",
            json={
                "api_url": github.url,
                "app": {
                    "app_id": app.app_id,
                    "installation_id": app.installation_id,
                    "private_key": app.private_key_pem,
                },
            },
        )
        assert answer.status_code == 200, answer.text
        shown = answer.json()
        assert shown["kind"] == "app" and shown["repository"] == repo and "private_key" not in answer.text

    pushed = push_workflow(ci_engine, WORKFLOW, before_push=configure)
    client, repo = pushed.client, names["repo"]
    run = wait_run(client, pushed.run_id)
    assert run["status"] == "failure", run
    assert job(run, "lint")["status"] == "failure"

    final = wait_for(
        "the final commit status", lambda: [s for s in github.posted(repo, pushed.sha) if s["state"] != "pending"]
    )
    statuses = github.posted(repo, pushed.sha)
    assert [s["state"] for s in statuses] == ["failure", "pending"], statuses
    assert final[0]["context"] == "leasehold/Checks"
    assert final[0]["target_url"] == f"{ci_engine.settings.resolved_public_base_url}/console/runs/{pushed.run_id}"
    assert final[0]["description"] == "Failed: lint"
    runs = wait_for("two check runs", lambda: len(github.check_runs) == 2 and dict(github.check_runs))
    by_name = {r["name"]: r for r in runs.values()}
    assert by_name["build"]["conclusion"] == "success" and by_name["lint"]["conclusion"] == "failure"
    (note,) = by_name["lint"]["annotations"]
    assert (note["path"], note["start_line"], note["annotation_level"], note["title"]) == (
        "src/app.py",
        3,
        "failure",
        "style",
    )
    assert note["message"] == "line too long"
    # The console's run page the status links to is there (it asks for a sign-in).
    assert ci_engine.anonymous().get(f"/console/runs/{pushed.run_id}").status_code in (200, 303, 401)

    # A redelivered webhook starts no second run, so nothing more is posted.
    (delivery,) = pushed.remote.deliveries()
    assert deliver(ci_engine, pushed.secret, "push", delivery.body).status_code == 202
    count = len(github.requests)
    again = wait_run(client, pushed.run_id)
    assert again["status"] == "failure"
    assert len(github.posted(repo, pushed.sha)) == 2 and len(github.check_runs) == 2
    assert len(github.requests) == count

    # Another tenant cannot see, set or remove this repository's reporter.
    other = ci_engine.new_tenant()
    path = f"/v1/repos/{pushed.repo_id}/status-reporter"
    assert other.get(path).status_code == 404
    assert other.put(path, json={"token": "mine"}).status_code == 404
    assert other.delete(path).status_code == 404
    assert client.get(path).json()["installation_id"] == app.installation_id


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"api_url": "http://169.254.169.254/latest", "token": "t0ken"}, "api_url"),
        ({"api_url": "ftp://github.example", "token": "t0ken"}, "api_url"),
        ({"token": "t0ken", "app": {"app_id": "1", "installation_id": "2", "private_key": "k"}}, "token"),
        ({}, "token"),
        ({"token": "t0ken", "repository": "no-slash"}, "repository"),
        ({"app": {"app_id": "one", "installation_id": "2", "private_key": "k"}}, "app.app_id"),
        ({"app": {"app_id": "1", "installation_id": "2", "private_key": "not pem"}}, "app.private_key"),
    ],
)
def test_a_bad_reporter_setting_is_a_400_naming_the_field(ci_stack: CIStack, body: dict, param: str) -> None:
    client = ci_stack.new_tenant()
    repo_id, _, _ = ci_stack.register(client, ci_stack.git_remote(), hook=False)
    answer = client.put(f"/v1/repos/{repo_id}/status-reporter", json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param, answer.text
    assert client.get(f"/v1/repos/{repo_id}/status-reporter").status_code == 404
