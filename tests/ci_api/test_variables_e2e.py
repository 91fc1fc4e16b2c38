"""Configuration variables (GitHub's ``vars`` context) end to end on real processes: set
through the API for the tenant and for one repository (which wins), read by a pushed workflow
in a job ``if:``, ``runs-on``, ``env``, a step and ``run-name``; never masked; other tenants kept out; bad
names and values refused naming the field."""

from __future__ import annotations

from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import job, log_text, push_workflow, wait_run

WORKFLOW = """
on: push
run-name: deploy ${{ vars.REGION }} @ ${{ github.ref_name }}
env:
  GREETING: ${{ vars.GREETING }}
jobs:
  configured:
    if: ${{ vars.ENABLED == 'yes' }}
    runs-on: ${{ vars.LABEL }}
    steps:
      - run: echo "greeting=$GREETING region=${{ vars.REGION }} missing=[${{ vars.NOPE }}]"
  skipped:
    if: ${{ vars.ENABLED != 'yes' }}
    runs-on: linux
    steps:
      - run: echo never
"""


def test_a_run_sees_its_tenants_and_repositorys_variables(ci_engine: CIStack) -> None:
    client = ci_engine.new_tenant()

    def configure(client_, repo_id: str) -> None:  # type: ignore[no-untyped-def]
        for name, value in (("greeting", "hello"), ("REGION", "tenant-wide"), ("ENABLED", "yes"), ("LABEL", "linux")):
            answer = client_.put(f"/v1/variables/{name}", json={"value": value})
            assert answer.status_code == 201, answer.text
        answer = client_.put(f"/v1/repos/{repo_id}/variables/region", json={"value": "eu-west"})
        assert answer.status_code == 201, answer.text
        listed = client_.get(f"/v1/repos/{repo_id}/variables").json()["data"]
        assert [(v["name"], v["value"]) for v in listed] == [("REGION", "eu-west")]

    pushed = push_workflow(ci_engine, WORKFLOW, client=client, before_push=configure)
    run = wait_run(client, pushed.run_id)
    assert run["status"] == "success", run
    # The run's title from run-name, over vars and github.
    assert run["display_title"] == "deploy eu-west @ main", run
    assert job(run, "configured")["status"] == "success"
    assert job(run, "skipped")["status"] == "skipped"
    text = log_text(client, pushed.run_id, "configured")
    # Not masked (variables are not secrets); the repository's value wins; a missing one is empty.
    assert "greeting=hello region=eu-west missing=[]" in text, text

    # Another tenant sees none of them and cannot reach the repository's.
    other = ci_engine.new_tenant()
    assert other.get("/v1/variables").json()["data"] == []
    assert other.get(f"/v1/repos/{pushed.repo_id}/variables").status_code == 404
    assert other.put(f"/v1/repos/{pushed.repo_id}/variables/X", json={"value": "1"}).status_code == 404
    assert other.delete("/v1/variables/GREETING").status_code == 404
    assert client.get("/v1/variables").json()["data"][0]["name"] == "ENABLED"

    # Bad input names its field (400 for a bad name or value, 422 for a body that does not fit
    # the schema, as everywhere in this API); nothing is stored.
    for name, body, status, field in (
        ("1abc", {"value": "x"}, 400, "name"),
        ("GITHUB_TOKEN", {"value": "x"}, 400, "name"),
        ("ok", {"value": "\u00e9" * (24 * 1024 + 1)}, 400, "value"),
        ("ok", {"value": "x" * (48 * 1024 + 1)}, 422, "value"),
        ("ok", {"value": "x", "extra": 1}, 422, "extra"),
        ("ok", {}, 422, "value"),
    ):
        answer = client.put(f"/v1/variables/{name}", json=body)
        assert answer.status_code == status, answer.text
        assert answer.json()["error"]["param"] == field, answer.text
    assert "OK" not in [v["name"] for v in client.get("/v1/variables").json()["data"]]
    assert client.delete("/v1/variables/greeting").status_code == 204
    assert client.delete("/v1/variables/greeting").status_code == 404
