"""``leasehold vars``: set, list (values shown: they are not secrets), delete, per tenant, per
repository and per deployment environment of a repository, with bad names refused naming the
field and no traceback."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.lifecycle.test_plans_retention_cli import leasehold


def test_set_list_and_delete_variables(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    # A data dir no stack initialised is refused; --init makes one (as a stack would).
    refused = leasehold("vars", "list", "--tenant", "acme", "--data-dir", data)
    assert refused.returncode != 0 and "--init" in refused.stderr, refused.stderr
    assert leasehold("vars", "list", "--tenant", "acme", "--data-dir", data, "--init").returncode == 0
    done = leasehold("vars", "set", "--tenant", "acme", "region", "eu-west", "--data-dir", data)
    assert done.returncode == 0, done.stderr
    assert "created variable REGION for tenant acme" in done.stderr
    again = leasehold("vars", "set", "--tenant", "acme", "REGION", "us-east", "--data-dir", data)
    assert "updated variable REGION" in again.stderr, again.stderr
    listed = leasehold("vars", "list", "--tenant", "acme", "--data-dir", data)
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(r["name"], r["value"], r["repo_id"]) for r in rows] == [("REGION", "us-east", None)]
    assert leasehold("vars", "list", "--tenant", "globex", "--data-dir", data).stdout == ""

    piped = subprocess.run(
        leasehold_argv("vars", "set", "--tenant", "acme", "NOTE", "-", "--data-dir", data),
        input="two\nlines\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert piped.returncode == 0, piped.stderr
    rows = [
        json.loads(line)
        for line in leasehold("vars", "list", "--tenant", "acme", "--data-dir", data).stdout.splitlines()
    ]
    assert {r["name"]: r["value"] for r in rows}["NOTE"] == "two\nlines"

    bad = leasehold("vars", "set", "--tenant", "acme", "GITHUB_X", "1", "--data-dir", data)
    assert bad.returncode != 0 and "name:" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    repo = leasehold("vars", "set", "--tenant", "acme", "--repo", "nope", "A", "1", "--data-dir", data)
    assert repo.returncode != 0 and "not registered" in repo.stderr, repo.stderr

    assert leasehold("vars", "delete", "--tenant", "acme", "region", "--data-dir", data).returncode == 0
    gone = leasehold("vars", "delete", "--tenant", "acme", "region", "--data-dir", data)
    assert gone.returncode != 0 and "no variable" in gone.stderr


def test_environment_variables(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    assert leasehold("vars", "list", "--tenant", "acme", "--data-dir", data, "--init").returncode == 0
    added = leasehold(
        "repos", "add", "--tenant", "acme", "--name", "acme/app", "--clone-url", "https://github.com/acme/app.git",
        "--webhook-secret", "webhook-secret-123", "--data-dir", data,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    repo = added.stdout.strip()
    scope = ("--tenant", "acme", "--repo", repo, "--data-dir", data)
    assert leasehold("vars", "set", *scope, "REGION", "eu-west").returncode == 0
    done = leasehold("vars", "set", *scope, "--environment", "Staging", "region", "eu-staging")
    assert done.returncode == 0, done.stderr
    assert f"created variable REGION for environment Staging of repository {repo}" in done.stderr, done.stderr

    listed = leasehold("vars", "list", *scope, "--environment", "staging")
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(r["name"], r["value"], r["repo_id"], r["environment"]) for r in rows] == [
        ("REGION", "eu-staging", repo, "staging")
    ]
    # The repository's own variable is untouched, and listed without the environment's.
    rows = [json.loads(line) for line in leasehold("vars", "list", *scope).stdout.splitlines()]
    assert [(r["name"], r["value"], r["environment"]) for r in rows] == [("REGION", "eu-west", None)]

    bad = leasehold("vars", "set", *scope, "--environment", "no spaces", "A", "1")
    assert bad.returncode != 0 and "environment:" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    bad = leasehold("vars", "list", *scope, "--environment", "no spaces")
    assert bad.returncode != 0 and "environment:" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    alone = leasehold("vars", "set", "--tenant", "acme", "--environment", "staging", "A", "1", "--data-dir", data)
    assert alone.returncode != 0 and "--environment needs --repo" in alone.stderr, alone.stderr

    assert leasehold("vars", "delete", *scope, "--environment", "STAGING", "region").returncode == 0
    gone = leasehold("vars", "delete", *scope, "--environment", "staging", "region")
    assert gone.returncode != 0 and "no variable" in gone.stderr
    assert leasehold("vars", "list", *scope, "--environment", "staging").stdout == ""
    assert len(leasehold("vars", "list", *scope).stdout.splitlines()) == 1


def leasehold_argv(*args: str) -> list[str]:
    import sys

    return [sys.executable, "-m", "cli.main", *args]
