"""Repository registration through the API and the CLI: validation, tenancy, no secret leaks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from leasehold.database import init_database
from leasehold.records.api_keys import create_key
from testing.harness import process_env
from tests.ci_api.conftest import CIStack


def test_register_list_get_and_tenant_scoping(ci_stack: CIStack) -> None:
    alice, bob = ci_stack.new_tenant(), ci_stack.new_tenant()
    secret = "s3cret-value-never-returned"
    local = f"{ci_stack.root}/srv/widgets.git"  # below LEASEHOLD_CI_LOCAL_REPO_ROOT; need not exist
    created = alice.post(
        "/v1/repos",
        json={"name": "acme/widgets", "clone_url": local, "webhook_secret": secret},
    )
    assert created.status_code == 201, created.text
    repo = created.json()
    assert repo["name"] == "acme/widgets" and repo["default_branch"] == "main"
    assert repo["id"].startswith("repo_")
    assert secret not in created.text and "webhook_secret" not in repo

    listed = alice.get("/v1/repos").json()["data"]
    assert [r["id"] for r in listed] == [repo["id"]]
    one = alice.get(f"/v1/repos/{repo['id']}")
    assert one.status_code == 200 and one.json()["clone_url"] == local
    assert secret not in one.text and secret not in alice.get("/v1/repos").text

    # Another tenant sees nothing and gets 404, not 403.
    assert bob.get("/v1/repos").json()["data"] == []
    assert bob.get(f"/v1/repos/{repo['id']}").status_code == 404
    # The same full name is free for another tenant; duplicate within a tenant is a conflict.
    same_name = {
        "name": "acme/widgets",
        "clone_url": "https://git.example.com/acme/widgets.git",
        "webhook_secret": "x" * 8,
    }
    assert bob.post("/v1/repos", json=same_name).status_code == 201
    dup = alice.post("/v1/repos", json=same_name)
    assert dup.status_code == 409 and dup.json()["error"]["param"] == "name"

    assert ci_stack.anonymous().get("/v1/repos").status_code == 401


HTTPS = "https://git.example.com/acme/x.git"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (
            {"name": "acme/x", "clone_url": "ssh://git@example.com/acme/x.git", "webhook_secret": "12345678"},
            "clone_url",
        ),
        ({"name": "acme/x", "clone_url": "git@example.com:acme/x.git", "webhook_secret": "12345678"}, "clone_url"),
        ({"name": "acme/x", "clone_url": "http://example.com/acme/x.git", "webhook_secret": "12345678"}, "clone_url"),
        ({"name": "acme/x", "clone_url": "relative/path", "webhook_secret": "12345678"}, "clone_url"),
        ({"name": "acme/x", "clone_url": "https://u:p@example.com/a/x.git", "webhook_secret": "12345678"}, "clone_url"),
        ({"name": "acme/x", "clone_url": "/srv/x.git", "webhook_secret": "12345678"}, "clone_url"),
        ({"name": "no-slash", "clone_url": HTTPS, "webhook_secret": "12345678"}, "name"),
        ({"name": "acme/x", "clone_url": HTTPS, "webhook_secret": "short"}, "webhook_secret"),
        (
            {"name": "acme/x", "clone_url": HTTPS, "webhook_secret": "12345678", "default_branch": "a..b"},
            "default_branch",
        ),
        ({"name": "acme/x", "webhook_secret": "12345678"}, "clone_url"),
    ],
)
def test_registration_validation_names_the_field(ci_stack: CIStack, body: dict, param: str) -> None:
    client = ci_stack.new_tenant()
    response = client.post("/v1/repos", json=body)
    assert response.status_code in (400, 422), response.text
    assert response.json()["error"]["param"] == param
    assert client.get("/v1/repos").json()["data"] == []


def test_cli_repos_add_is_visible_through_the_api(ci_stack: CIStack) -> None:
    tenant = "cli-tenant"
    key = create_key(init_database(ci_stack.settings.resolved_database_url), tenant, "u", "paid")
    leasehold = str(Path(sys.executable).parent / "leasehold")
    env = process_env(ci_stack.settings)
    argv = [leasehold, "repos", "add", "--tenant", tenant, "--name", "acme/cli", "--clone-url"]
    ok = subprocess.run(
        [*argv, f"file://{ci_stack.root}/cli.git", "--webhook-secret", "cli-secret-123"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    repo_id = ok.stdout.strip()
    assert "cli-secret-123" not in ok.stdout + ok.stderr

    bad = subprocess.run(
        [*argv, "ftp://example.com/x", "--webhook-secret", "cli-secret-123"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2 and "clone_url" in bad.stderr and "Traceback" not in bad.stderr

    with ci_stack.anonymous() as client:
        client.headers["Authorization"] = f"Bearer {key}"
        listed = client.get("/v1/repos").json()["data"]
    assert [(r["id"], r["name"], r["clone_url"]) for r in listed] == [
        (repo_id, "acme/cli", f"file://{ci_stack.root}/cli.git")
    ]


def test_refused_paths_read_the_same_whether_they_exist(ci_stack: CIStack) -> None:
    # Issue 11: a tenant probed the host's files through registration errors.
    client = ci_stack.new_tenant()
    answers = []
    for path in ("/etc", "/no/such/dir", f"file://{ci_stack.settings.data_dir}", f"{ci_stack.root}/../x"):
        response = client.post("/v1/repos", json={"name": "acme/probe", "clone_url": path, "webhook_secret": "x" * 8})
        assert response.status_code in (400, 422) and response.json()["error"]["param"] == "clone_url"
        answers.append(response.json()["error"]["message"])
    assert len(set(answers)) == 1 and "/etc" not in answers[0]
    assert client.get("/v1/repos").json()["data"] == []
