"""The people's CLI against the session's CI and video stack: the API, an orchestration worker,
a CI worker and a GPU worker as real processes on the session's dev server (the CI tests' stack
plus a GPU worker, shared with tests/console). Tests run the real ``leasehold`` CLI as a
subprocess against it, with only an API URL and a key."""

from __future__ import annotations

import fcntl
import os
import pty
import secrets
import select
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass

import pytest

from leasehold.database import init_database
from leasehold.records.api_keys import create_key
from testing.harness import REPO_ROOT
from tests.ci_api.conftest import CIStack

MODEL = "procedural-v1"
# Small and short so generation takes seconds on two CPU cores.
SIZE = "180x320"
FAST_STEPS = 4
# A job that is still running when the test cancels it.
SLOW_STEPS = 1000
CLI_TIMEOUT = 120.0


@dataclass
class Person:
    """One API key, as a person holding it would use the CLI."""

    tenant_id: str
    key: str
    url: str

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_")}
        env.update(LEASEHOLD_API_URL=self.url, LEASEHOLD_API_KEY=self.key, PYTHONUNBUFFERED="1")
        env.update(extra)
        return env

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "cli.main", *args]

    def run(self, *args: str, timeout: float = CLI_TIMEOUT, **env: str) -> subprocess.CompletedProcess[str]:
        """``leasehold ARGS`` to the end; stdout and stderr captured (stdout is not a TTY)."""
        return subprocess.run(
            self.argv(*args),
            cwd=REPO_ROOT,
            env=self.env(**env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def run_in_terminal(self, *args: str, timeout: float = CLI_TIMEOUT, columns: int = 160) -> tuple[int, str]:
        """``leasehold ARGS`` with stdout and stderr on a pseudo-terminal (``columns`` wide), as
        a person at a terminal runs it; (exit code, everything it wrote there)."""
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
        # The terminal's size is the window's (a runner may export COLUMNS/LINES: xdist does).
        hidden = ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES")
        env = {k: v for k, v in self.env(TERM="xterm-256color").items() if k not in hidden}
        try:
            proc = subprocess.Popen(
                self.argv(*args), cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave
            )
        finally:
            os.close(slave)
        output = bytearray()
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                ready, _, _ = select.select([master], [], [], 0.5)
                if not ready:
                    continue
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not data:
                    break
                output += data
            else:
                raise AssertionError(f"{args} still writing after {timeout}s: {bytes(output[-2000:])!r}")
            return proc.wait(timeout=30), output.decode(errors="replace")
        finally:
            os.close(master)
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)

    def start(self, *args: str, **env: str) -> subprocess.Popen[str]:
        """``leasehold ARGS`` in the background, its stdout and stderr as pipes."""
        return subprocess.Popen(
            self.argv(*args),
            cwd=REPO_ROOT,
            env=self.env(**env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def run_all(
    *calls: tuple[Person, tuple[str, ...]], timeout: float = CLI_TIMEOUT
) -> list[subprocess.CompletedProcess[str]]:
    """Several independent CLI calls at once (each one a real process); their results in order.

    Most of a short call is the interpreter starting, so calls that do not depend on each
    other run side by side to keep the package's wall time down.
    """
    procs = [(who.start(*argv), argv) for who, argv in calls]
    results = []
    deadline = time.monotonic() + timeout
    try:
        for proc, argv in procs:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results.append(subprocess.CompletedProcess(list(argv), proc.returncode, out, err))
    finally:
        for proc, _argv in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    return results


def person(stack: CIStack, url: str | None = None) -> Person:
    """A fresh tenant's key, used through ``url`` (default: the API itself)."""
    tenant = f"tenant-{secrets.token_hex(4)}"
    key = create_key(init_database(stack.settings.resolved_database_url), tenant, "user", "paid")
    return Person(tenant, key, url or stack.base_url)


def assert_one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    """The failure is one ``leasehold: error:`` line naming what went wrong, never a traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stdout == "", result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("leasehold: error: "), result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


@pytest.fixture(scope="package")
def people_stack(ci_video_stack: CIStack) -> CIStack:
    return ci_video_stack
