"""Tenant isolation: every CI endpoint answers tenant B exactly as if tenant A's things did not
exist (404, or absent from lists), endpoint by endpoint over the app's route table, so a new CI
endpoint without a case here fails; and a job cannot see another job's workspace."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import pytest

from api.app import create_app
from leasehold.settings import Settings
from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import Pushed, job, log_text, push_workflow, wait_run

pytestmark = pytest.mark.slow

A_VALUE = "tenant-a-secret-value-31337"

FAILING = """
name: victim
on: push
jobs:
  build:
    runs-on: linux
    env:
      TOKEN: ${{ secrets.A_TOKEN }}
    steps:
      - run: echo "victim output"; exit 3
"""


@dataclass
class Victim:
    """Tenant A's things (ids tenant B will try)."""

    pushed: Pushed
    push_id: str


def ci_routes() -> set[tuple[str, str]]:
    """Every (method, path) the app serves under the "ci" tag, from its OpenAPI description
    (the route table as clients see it)."""
    schema = create_app(Settings()).openapi()
    found = set()
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if "ci" in operation.get("tags", []):
                found.add((method.upper(), path))
    return found


# (method, path) -> how tenant B tries it with tenant A's ids, and what B must see.
Probe = Callable[[httpx.Client, Victim], None]


def expect_404(method: str, url: Callable[[Victim], str], body: dict | None = None) -> Probe:
    def probe(b: httpx.Client, v: Victim) -> None:
        response = b.request(method, url(v), json=body)
        assert response.status_code == 404, (method, url(v), response.status_code, response.text)
        assert response.json()["error"]["code"] == "not_found"

    return probe


def expect_absent(url: str) -> Probe:
    def probe(b: httpx.Client, v: Victim) -> None:
        response = b.get(url)
        assert response.status_code == 200, response.text
        text = response.text
        assert v.pushed.repo_id not in text and v.pushed.run_id not in text
        assert "A_TOKEN" not in text and "A_VAR" not in text

    return probe


def webhook_needs_signature(b: httpx.Client, v: Victim) -> None:
    # No API key scopes this one: the repository's own webhook secret does, so B, holding
    # only an API key, is refused.
    response = b.post("/v1/hooks/github", json={"repository": {"full_name": v.pushed.name}})
    assert response.status_code == 401


def repos_post_is_own_namespace(b: httpx.Client, v: Victim) -> None:
    # Registering the same name creates B's own repository, never touching A's.
    response = b.post(
        "/v1/repos",
        json={"name": v.pushed.name, "clone_url": "https://git.example.com/b/x.git", "webhook_secret": "s" * 16},
    )
    assert response.status_code == 201 and response.json()["id"] != v.pushed.repo_id


def secret_put_stays_in_b(b: httpx.Client, v: Victim) -> None:
    assert b.put("/v1/secrets/A_TOKEN", json={"value": "tenant-b-own-value"}).status_code == 201
    assert b.delete("/v1/secrets/A_TOKEN").status_code == 204
    assert b.delete("/v1/secrets/A_TOKEN").status_code == 404  # A's still exists; B has none


def variable_put_stays_in_b(b: httpx.Client, v: Victim) -> None:
    assert b.put("/v1/variables/A_VAR", json={"value": "tenant-b-own-value"}).status_code == 201
    assert b.delete("/v1/variables/A_VAR").status_code == 204
    assert b.delete("/v1/variables/A_VAR").status_code == 404  # A's still exists; B has none


SHA = "0" * 39 + "1"
PROBES: dict[tuple[str, str], Probe] = {
    ("POST", "/v1/repos"): repos_post_is_own_namespace,
    ("GET", "/v1/repos"): expect_absent("/v1/repos"),
    ("GET", "/v1/repos/{repo_id}"): expect_404("GET", lambda v: f"/v1/repos/{v.pushed.repo_id}"),
    ("POST", "/v1/hooks/github"): webhook_needs_signature,
    ("POST", "/v1/hooks/push"): expect_404(
        "POST", lambda v: "/v1/hooks/push", {"repo_id": "", "commit_sha": SHA, "ref": "refs/heads/main"}
    ),
    ("GET", "/v1/pushes/{push}"): expect_404("GET", lambda v: f"/v1/pushes/{v.push_id}"),
    ("GET", "/v1/runs"): expect_absent("/v1/runs"),
    ("GET", "/v1/runs/{run}"): expect_404("GET", lambda v: f"/v1/runs/{v.pushed.run_id}"),
    ("GET", "/v1/runs/{run}/jobs/{job}"): expect_404("GET", lambda v: f"/v1/runs/{v.pushed.run_id}/jobs/build"),
    ("POST", "/v1/runs/{run}/cancel"): expect_404("POST", lambda v: f"/v1/runs/{v.pushed.run_id}/cancel"),
    ("POST", "/v1/runs/{run}/rerun"): expect_404("POST", lambda v: f"/v1/runs/{v.pushed.run_id}/rerun"),
    ("POST", "/v1/runs/{run}/jobs/{job}/retry"): expect_404(
        "POST", lambda v: f"/v1/runs/{v.pushed.run_id}/jobs/build/retry"
    ),
    ("GET", "/v1/runs/{run}/jobs/{job}/logs"): expect_404(
        "GET", lambda v: f"/v1/runs/{v.pushed.run_id}/jobs/build/logs"
    ),
    ("GET", "/v1/runs/{run}/jobs/{job}/logs.txt"): expect_404(
        "GET", lambda v: f"/v1/runs/{v.pushed.run_id}/jobs/build/logs.txt"
    ),
    ("GET", "/v1/runs/{run}/jobs/{job}/logs/stream"): expect_404(
        "GET", lambda v: f"/v1/runs/{v.pushed.run_id}/jobs/build/logs/stream"
    ),
    ("GET", "/v1/runs/{run}/jobs/{job}/annotations"): expect_404(
        "GET", lambda v: f"/v1/runs/{v.pushed.run_id}/jobs/build/annotations"
    ),
    ("GET", "/v1/runs/{run}/jobs/{job}/summary"): expect_404(
        "GET", lambda v: f"/v1/runs/{v.pushed.run_id}/jobs/build/summary"
    ),
    ("POST", "/v1/repos/{repo_id}/dispatches"): expect_404(
        "POST", lambda v: f"/v1/repos/{v.pushed.repo_id}/dispatches", {"workflow": "ci.yml", "ref": "main"}
    ),
    ("PUT", "/v1/secrets/{name}"): secret_put_stays_in_b,
    ("GET", "/v1/secrets"): expect_absent("/v1/secrets"),
    ("DELETE", "/v1/secrets/{name}"): expect_404("DELETE", lambda v: "/v1/secrets/A_TOKEN"),
    ("PUT", "/v1/repos/{repo_id}/secrets/{name}"): expect_404(
        "PUT", lambda v: f"/v1/repos/{v.pushed.repo_id}/secrets/A_TOKEN", {"value": "overwrite-attempt"}
    ),
    ("GET", "/v1/repos/{repo_id}/secrets"): expect_404("GET", lambda v: f"/v1/repos/{v.pushed.repo_id}/secrets"),
    ("DELETE", "/v1/repos/{repo_id}/secrets/{name}"): expect_404(
        "DELETE", lambda v: f"/v1/repos/{v.pushed.repo_id}/secrets/A_TOKEN"
    ),
    ("PUT", "/v1/variables/{name}"): variable_put_stays_in_b,
    ("GET", "/v1/variables"): expect_absent("/v1/variables"),
    ("DELETE", "/v1/variables/{name}"): expect_404("DELETE", lambda v: "/v1/variables/A_VAR"),
    ("PUT", "/v1/repos/{repo_id}/variables/{name}"): expect_404(
        "PUT", lambda v: f"/v1/repos/{v.pushed.repo_id}/variables/A_VAR", {"value": "overwrite-attempt"}
    ),
    ("GET", "/v1/repos/{repo_id}/variables"): expect_404("GET", lambda v: f"/v1/repos/{v.pushed.repo_id}/variables"),
    ("DELETE", "/v1/repos/{repo_id}/variables/{name}"): expect_404(
        "DELETE", lambda v: f"/v1/repos/{v.pushed.repo_id}/variables/A_VAR"
    ),
    ("PUT", "/v1/repos/{repo_id}/environments/{environment}/variables/{name}"): expect_404(
        "PUT", lambda v: f"/v1/repos/{v.pushed.repo_id}/environments/production/variables/A_VAR", {"value": "x"}
    ),
    ("GET", "/v1/repos/{repo_id}/environments/{environment}/variables"): expect_404(
        "GET", lambda v: f"/v1/repos/{v.pushed.repo_id}/environments/production/variables"
    ),
    ("DELETE", "/v1/repos/{repo_id}/environments/{environment}/variables/{name}"): expect_404(
        "DELETE", lambda v: f"/v1/repos/{v.pushed.repo_id}/environments/production/variables/A_VAR"
    ),
    ("PUT", "/v1/repos/{repo_id}/environments/{name}"): expect_404(
        "PUT", lambda v: f"/v1/repos/{v.pushed.repo_id}/environments/production", {"required_approval": False}
    ),
    ("GET", "/v1/repos/{repo_id}/environments"): expect_404(
        "GET", lambda v: f"/v1/repos/{v.pushed.repo_id}/environments"
    ),
    ("POST", "/v1/runs/{run}/jobs/{job}/approve"): expect_404(
        "POST", lambda v: f"/v1/runs/{v.pushed.run_id}/jobs/build/approve"
    ),
    ("POST", "/v1/runs/{run}/jobs/{job}/reject"): expect_404(
        "POST", lambda v: f"/v1/runs/{v.pushed.run_id}/jobs/build/reject"
    ),
    ("PUT", "/v1/repos/{repo_id}/status-reporter"): expect_404(
        "PUT", lambda v: f"/v1/repos/{v.pushed.repo_id}/status-reporter", {"token": "b-token"}
    ),
    ("GET", "/v1/repos/{repo_id}/status-reporter"): expect_404(
        "GET", lambda v: f"/v1/repos/{v.pushed.repo_id}/status-reporter"
    ),
    ("DELETE", "/v1/repos/{repo_id}/status-reporter"): expect_404(
        "DELETE", lambda v: f"/v1/repos/{v.pushed.repo_id}/status-reporter"
    ),
    ("GET", "/v1/runs/{run}/artifacts"): expect_404("GET", lambda v: f"/v1/runs/{v.pushed.run_id}/artifacts"),
    ("GET", "/v1/runs/{run}/artifacts/{artifact_id}/zip"): expect_404(
        "GET", lambda v: f"/v1/runs/{v.pushed.run_id}/artifacts/1/zip"
    ),
}


def test_every_ci_endpoint_has_an_isolation_probe() -> None:
    routes = ci_routes()
    missing = routes - set(PROBES)
    assert not missing, f"CI endpoints without a cross-tenant probe in PROBES: {sorted(missing)}"
    assert not set(PROBES) - routes, "PROBES names endpoints that no longer exist"


@pytest.fixture(scope="module")
def victim(tenancy: CIStack) -> Victim:
    def secrets(client: httpx.Client, repo_id: str) -> None:
        assert client.put("/v1/secrets/A_TOKEN", json={"value": A_VALUE}).status_code == 201
        assert client.put(f"/v1/repos/{repo_id}/secrets/A_TOKEN", json={"value": A_VALUE}).status_code == 201
        assert client.put("/v1/variables/A_VAR", json={"value": "a-tenant-wide"}).status_code == 201
        assert client.put(f"/v1/repos/{repo_id}/variables/A_VAR", json={"value": "a-repo"}).status_code == 201
        answer = client.put(f"/v1/repos/{repo_id}/environments/production/variables/A_VAR", json={"value": "a-env"})
        assert answer.status_code == 201

    pushed = push_workflow(tenancy, FAILING, before_push=secrets)
    run = wait_run(pushed.client, pushed.run_id)
    assert job(run, "build")["status"] == "failure"
    push_id = json.loads(pushed.remote.deliveries()[-1].answer)["pushes"][0]["id"]
    return Victim(pushed, push_id)


@pytest.mark.parametrize("endpoint", sorted(PROBES), ids=lambda e: f"{e[0]} {e[1]}")
def test_tenant_b_cannot_reach_tenant_a(tenancy: CIStack, victim: Victim, endpoint: tuple[str, str]) -> None:
    b = tenancy.new_tenant()
    PROBES[endpoint](b, victim)
    # And A still has everything, unchanged.
    a = victim.pushed.client
    assert a.get(f"/v1/repos/{victim.pushed.repo_id}").status_code == 200
    run = a.get(f"/v1/runs/{victim.pushed.run_id}").json()
    assert run["status"] == "failure" and job(run, "build")["attempt"] == 1
    assert [s["name"] for s in a.get("/v1/secrets").json()["data"]] == ["A_TOKEN"]
    assert [s["name"] for s in a.get(f"/v1/repos/{victim.pushed.repo_id}/secrets").json()["data"]] == ["A_TOKEN"]
    assert [(x["name"], x["value"]) for x in a.get("/v1/variables").json()["data"]] == [("A_VAR", "a-tenant-wide")]
    repo_vars = a.get(f"/v1/repos/{victim.pushed.repo_id}/variables").json()["data"]
    assert [(x["name"], x["value"]) for x in repo_vars] == [("A_VAR", "a-repo")]
    env_vars = a.get(f"/v1/repos/{victim.pushed.repo_id}/environments/production/variables").json()["data"]
    assert [(x["name"], x["value"]) for x in env_vars] == [("A_VAR", "a-env")]
    assert "victim output" in log_text(a, victim.pushed.run_id, "build")


# The marker is computed at run time, so the workflow file and step scripts (which every job of
# the run has in its own workspace) do not contain it.
SPY = """
name: jobs
on: push
jobs:
  holder:
    runs-on: linux
    steps:
      - run: |
          m="holder-$((6*7))-mark"
          echo "$m" > "$GITHUB_WORKSPACE/marker.txt"
          echo "$m" > "$HOME/marker.txt"
          echo "$m" > /tmp/marker.txt
          sleep 8
  spy:
    runs-on: linux
    steps:
      - run: |
          sleep 3
          echo "spy sees:"; ls -la / /ci /tmp
          m="holder-$((6*7))-mark"
          found=$(grep -rl "$m" /ci /tmp /home /root /var /run /mnt /srv /opt 2>/dev/null || true)
          echo "found=[$found]"
          echo "processes visible: $(ls /proc | grep -c '^[0-9]' || true)"
          test -z "$found"
"""


def test_a_job_cannot_read_another_jobs_workspace(tenancy: CIStack) -> None:
    pushed = push_workflow(tenancy, SPY)
    run = wait_run(pushed.client, pushed.run_id)
    holder, spy = job(run, "holder"), job(run, "spy")
    spy_log = log_text(pushed.client, pushed.run_id, "spy")
    assert holder["status"] == "success", log_text(pushed.client, pushed.run_id, "holder")
    assert spy["status"] == "success", spy_log
    assert "found=[]" in spy_log
    # The spy looked while the holder's files existed (both ran at once on the 2-slot worker).
    assert spy["started_at"] < holder["finished_at"] and holder["started_at"] < spy["finished_at"]
