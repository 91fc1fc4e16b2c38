"""A new user's first run of ``leasehold up``: the port the README documents is the one it
binds (``LEASEHOLD_API_PORT``, ``make up API_PORT=...``), it says one line about the database
before its banner, and an admin command run from elsewhere is told which data dir the stack
uses instead of quietly making an empty one of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from leasehold.devserver import free_port
from testing.harness import REPO_ROOT
from tests.foundation.test_up import Stack, process_tree, start_stack, wait_gone

pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_")}
    env.update(PYTHONUNBUFFERED="1", **extra)
    return env


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, Path, int]]:
    """``leasehold up`` on a fresh data dir, its API port from LEASEHOLD_API_PORT alone."""
    data_dir = tmp_path_factory.mktemp("first-run") / "data"
    api_port = free_port()
    stack = start_stack(data_dir, (None, free_port(), free_port()), "first-run", LEASEHOLD_API_PORT=str(api_port))
    try:
        yield stack, data_dir, api_port
    finally:
        tree = process_tree(stack.proc.pid)
        stack.proc.terminate()
        try:
            stack.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            stack.proc.kill()
            stack.proc.wait(timeout=10)
        for pid in wait_gone(tree, 30) and tree:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def test_up_binds_the_api_port_the_settings_name(first_run: tuple[Stack, Path, int]) -> None:
    stack, _data_dir, api_port = first_run
    assert stack.api == f"http://127.0.0.1:{api_port}", stack.output()
    assert httpx.get(f"{stack.api}/healthz", timeout=10).status_code == 200


def test_make_up_passes_the_ports_through() -> None:
    # Run under `make test` too: a make started by make prints "Entering directory" lines
    # unless told not to, and inherits the outer make's flags.
    outer = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")
    shown = subprocess.run(
        ["make", "--no-print-directory", "-n", "up", "API_PORT=8123", "TEMPORAL_PORT=7999", "UP_ARGS=--no-ui"],
        cwd=REPO_ROOT,
        env={k: v for k, v in _env().items() if k not in outer},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[-1].split() == [
        ".venv/bin/leasehold",
        "up",
        "--api-port",
        "8123",
        "--temporal-port",
        "7999",
        "--no-ui",
    ], shown.stdout


def test_up_says_one_line_about_the_database(first_run: tuple[Stack, Path, int]) -> None:
    stack, _data_dir, _api_port = first_run
    said = stack.err.read_text()
    assert "alembic" not in said, said
    database = [line for line in said.splitlines() if "database at revision" in line]
    assert len(database) == 1, said
    assert database[0].split("database at revision ")[1].strip().isdigit(), database


def test_an_admin_command_elsewhere_names_the_running_stacks_data_dir(
    first_run: tuple[Stack, Path, int], tmp_path: Path
) -> None:
    stack, data_dir, _api_port = first_run
    # In another directory, without --data-dir: the default ./.leasehold there is not the stack's.
    added = subprocess.run(
        [sys.executable, "-m", "cli.main", "repos", "list", "--tenant", "default"],
        cwd=tmp_path,
        env=_env(PYTHONPATH=str(REPO_ROOT)),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert added.returncode == 2, added.stdout + added.stderr
    (line,) = added.stderr.strip().splitlines()
    assert f"data dir {tmp_path / '.leasehold'} has no leasehold database" in line, line
    assert f"{data_dir} (leasehold up, pid {stack.proc.pid})" in line, line
    assert not (tmp_path / ".leasehold").exists()
    # Named, the stack's data dir is accepted.
    named = subprocess.run(
        [sys.executable, "-m", "cli.main", "repos", "list", "--tenant", "default", "--data-dir", str(data_dir)],
        cwd=tmp_path,
        env=_env(PYTHONPATH=str(REPO_ROOT)),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert named.returncode == 0, named.stderr
