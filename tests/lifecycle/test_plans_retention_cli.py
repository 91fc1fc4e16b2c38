"""``leasehold plans retention``: a tenant's CI log retention, validated, shown by ``plans show``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testing.harness import REPO_ROOT


def leasehold(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_")}
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_set_show_and_reset_a_tenants_retention(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    # A fresh data dir, started on purpose (admin commands refuse one no stack initialised).
    shown = leasehold("plans", "show", "--tenant", "acme", "--data-dir", data, "--init")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["log_retention_days"] == 90

    done = leasehold("plans", "retention", "--tenant", "acme", "--days", "30", "--data-dir", data)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"tenant_id": "acme", "log_retention_days": 30, "default": False}
    assert (
        json.loads(leasehold("plans", "show", "--tenant", "acme", "--data-dir", data).stdout)["log_retention_days"]
        == 30
    )
    # Another tenant keeps the default.
    other = leasehold("plans", "show", "--tenant", "globex", "--data-dir", data)
    assert json.loads(other.stdout)["log_retention_days"] == 90

    reset = leasehold("plans", "retention", "--tenant", "acme", "--default", "--data-dir", data)
    assert reset.returncode == 0, reset.stderr
    assert (
        json.loads(leasehold("plans", "show", "--tenant", "acme", "--data-dir", data).stdout)["log_retention_days"]
        == 90
    )


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--days", "0"], "log_retention_days must be 1 to 3650"),
        (["--days", "3651"], "log_retention_days must be 1 to 3650"),
        ([], "give either --days N or --default"),
        (["--days", "5", "--default"], "give either --days N or --default"),
    ],
)
def test_bad_retention_is_one_clear_line(tmp_path: Path, args: list[str], fragment: str) -> None:
    result = leasehold("plans", "retention", "--tenant", "acme", *args, "--data-dir", str(tmp_path / "data"), "--init")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("leasehold: error: ")
    assert fragment in result.stderr
