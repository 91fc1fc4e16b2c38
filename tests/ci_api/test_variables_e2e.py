"""Configuration variables (GitHub's ``vars`` context) end to end on real processes: set
through the API for the tenant and for one repository (which wins), read by a pushed workflow
in a job ``if:``, ``runs-on``, ``env``, a step and ``run-name``; never masked; other tenants kept out; bad
names and values refused naming the field. A deployment environment's variables win over both
for the jobs that name it (written out, or ``${{ vars.TARGET }}``), and only for them."""

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


ENVIRONMENTS = """
on: push
jobs:
  deploy:
    environment: staging
    # Job-level expressions see the environment's variables too (STAGE and LABEL are its only).
    if: ${{ vars.STAGE == 'staging' }}
    runs-on: ${{ vars.LABEL }}
    steps:
      - run: echo "deploy x=${{ vars.X }} region=${{ vars.REGION }} stage=${{ vars.STAGE }}"
  build:
    runs-on: linux
    steps:
      - run: echo "build x=${{ vars.X }} region=${{ vars.REGION }} stage=[${{ vars.STAGE }}]"
  # A name from an expression, evaluated when the push is listed: its environment's variables too.
  promote:
    environment: {name: "${{ vars.TARGET }}", url: "https://${{ vars.TARGET }}.example"}
    runs-on: linux
    steps:
      - run: echo "promote x=${{ vars.X }} stage=${{ vars.STAGE }} target=${{ vars.TARGET }}"
"""


def test_a_job_naming_an_environment_sees_its_variables_over_the_repositorys(ci_engine: CIStack) -> None:
    client = ci_engine.new_tenant()

    def configure(client_, repo_id: str) -> None:  # type: ignore[no-untyped-def]
        assert client_.put("/v1/variables/REGION", json={"value": "tenant-wide"}).status_code == 201
        assert client_.put(f"/v1/repos/{repo_id}/variables/X", json={"value": "from-repo"}).status_code == 201
        assert client_.put(f"/v1/repos/{repo_id}/variables/TARGET", json={"value": "Staging"}).status_code == 201
        # Environment names are case-insensitive, as the job's ``environment:`` is.
        base = f"/v1/repos/{repo_id}/environments/Staging/variables"
        for name, value in (("x", "from-staging"), ("STAGE", "staging"), ("LABEL", "linux")):
            answer = client_.put(f"{base}/{name}", json={"value": value})
            assert answer.status_code == 201, answer.text
            assert answer.json()["environment"] == "staging", answer.text
        assert client_.put(f"{base}/STAGE", json={"value": "staging"}).status_code == 200
        listed = client_.get(f"/v1/repos/{repo_id}/environments/staging/variables").json()["data"]
        assert [(v["name"], v["value"], v["environment"]) for v in listed] == [
            ("LABEL", "linux", "staging"),
            ("STAGE", "staging", "staging"),
            ("X", "from-staging", "staging"),
        ]
        # The repository's own list holds only its variables.
        assert [v["name"] for v in client_.get(f"/v1/repos/{repo_id}/variables").json()["data"]] == ["TARGET", "X"]

    pushed = push_workflow(ci_engine, ENVIRONMENTS, client=client, before_push=configure)
    run = wait_run(client, pushed.run_id)
    assert run["status"] == "success", run
    assert job(run, "deploy")["status"] == "success", run
    deployed = log_text(client, pushed.run_id, "deploy")
    assert "deploy x=from-staging region=tenant-wide stage=staging" in deployed, deployed
    built = log_text(client, pushed.run_id, "build")
    assert "build x=from-repo region=tenant-wide stage=[]" in built, built
    assert job(run, "promote")["environment"] == "Staging", run
    promoted = log_text(client, pushed.run_id, "promote")
    assert "promote x=from-staging stage=staging target=Staging" in promoted, promoted

    # Another tenant cannot read, write or delete them.
    base = f"/v1/repos/{pushed.repo_id}/environments/staging/variables"
    other = ci_engine.new_tenant()
    assert other.get(base).status_code == 404
    assert other.put(f"{base}/X", json={"value": "1"}).status_code == 404
    assert other.delete(f"{base}/X").status_code == 404
    assert [v["value"] for v in client.get(base).json()["data"] if v["name"] == "X"] == ["from-staging"]

    # Bad input names its field; nothing is stored.
    for environment, name, body, status, field in (
        ("bad env", "OK", {"value": "x"}, 400, "environment"),
        ("e" * 101, "OK", {"value": "x"}, 400, "environment"),
        ("staging", "GITHUB_X", {"value": "x"}, 400, "name"),
        ("staging", "OK", {"value": "x" * (48 * 1024 + 1)}, 422, "value"),
    ):
        answer = client.put(f"/v1/repos/{pushed.repo_id}/environments/{environment}/variables/{name}", json=body)
        assert answer.status_code == status, answer.text
        assert answer.json()["error"]["param"] == field, answer.text
    answer = client.get(f"/v1/repos/{pushed.repo_id}/environments/bad env/variables")
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "environment", answer.text
    assert "OK" not in [v["name"] for v in client.get(base).json()["data"]]
    assert client.delete(f"{base}/stage").status_code == 204
    assert client.delete(f"{base}/stage").status_code == 404
    assert client.delete(f"/v1/repos/{pushed.repo_id}/environments/production/variables/X").status_code == 404
