"""The ``leasehold`` CLI as users run it: keys are printed once and work; mistakes are one line,
exit 2; admin commands open only a database a stack initialised (or ``--init``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from leasehold.database import init_database
from leasehold.records.api_keys import lookup
from leasehold.settings import Settings
from testing.harness import REPO_ROOT


def leasehold(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_")}
    env.update(extra)
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_keys_create_prints_a_working_key(tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = leasehold(
        "keys", "create", "--tenant", "acme", "--user", "alice", "--tier", "free", "--data-dir", str(data), "--init"
    )
    assert result.returncode == 0, result.stderr
    key = result.stdout.strip()
    assert result.stdout == key + "\n"  # stdout is the key alone, for scripts
    assert key not in result.stderr
    principal = lookup(init_database(Settings(data_dir=data).resolved_database_url), key)
    assert principal is not None
    assert (principal.tenant_id, principal.user_id, principal.tier) == ("acme", "alice", "free")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--tenant", "acme", "--user", "alice", "--tier", "gold"], "tier must be one of paid, free"),
        (["--tenant", "bad tenant", "--user", "alice", "--tier", "paid"], "tenant must be"),
        (["--tenant", "acme", "--user", "../x", "--tier", "paid"], "user must be"),
    ],
)
def test_keys_create_rejects_bad_input_in_one_line(tmp_path: Path, args: list[str], fragment: str) -> None:
    result = leasehold("keys", "create", *args, "--data-dir", str(tmp_path / "data"), "--init")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith("leasehold: error: ")
    assert fragment in result.stderr


def test_keys_create_unwritable_data_dir(tmp_path: Path) -> None:
    argv = ["--tenant", "a", "--user", "b", "--tier", "paid", "--data-dir", "/proc/lh", "--init"]
    result = leasehold("keys", "create", *argv)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == "leasehold: error: data dir /proc/lh is not writable: No such file or directory"


def test_invalid_setting_is_one_line(tmp_path: Path) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_")}, "LEASEHOLD_API_PORT": "many"}
    argv = ["keys", "create", "--tenant", "a", "--user", "b", "--tier", "paid", "--data-dir", str(tmp_path / "d")]
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", *argv], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "LEASEHOLD_API_PORT" in result.stderr


ADMIN_COMMANDS = [
    ["keys", "create", "--tenant", "acme", "--user", "alice", "--tier", "paid"],
    [
        "repos",
        "add",
        "--tenant",
        "acme",
        "--name",
        "acme/app",
        "--clone-url",
        "https://example.com/a.git",
        "--webhook-secret",
        "s3cret-s3cret",
    ],
    ["repos", "list", "--tenant", "acme"],
    ["plans", "show", "--tenant", "acme"],
    ["secrets", "list", "--tenant", "acme"],
    ["environments", "list", "--tenant", "acme", "--repo", "r"],
    ["readmodel", "rebuild"],
]


@pytest.mark.parametrize("argv", ADMIN_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_admin_commands_refuse_a_data_dir_no_stack_initialised(tmp_path: Path, argv: list[str]) -> None:
    # The stack's data dir, named by LEASEHOLD_DATA_DIR; the command is given another.
    used = tmp_path / "used"
    used.mkdir()
    init_database(Settings(data_dir=used).resolved_database_url)
    stray = tmp_path / "stray"
    result = leasehold(*argv, "--data-dir", str(stray), LEASEHOLD_DATA_DIR=str(used))
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"leasehold: error: data dir {stray} has no leasehold database"), line
    # It names the data dir in use, and how to start a new one on purpose.
    assert "; in use: " in line and f"{used} (LEASEHOLD_DATA_DIR)" in line and "--init" in line, line
    # Nothing was created: no second, empty deployment.
    assert not stray.exists()


def test_an_initialised_data_dir_and_init_are_accepted(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    first = leasehold("plans", "show", "--tenant", "acme", "--data-dir", str(fresh), "--init")
    assert first.returncode == 0, first.stderr
    assert (fresh / "leasehold.db").is_file()
    # Initialised now: later commands need no flag.
    again = leasehold("repos", "list", "--tenant", "acme", "--data-dir", str(fresh))
    assert again.returncode == 0 and again.stdout == "", again.stderr
