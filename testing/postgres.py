"""A private PostgreSQL server for tests and chaos runs: its own data dir, its own loopback port,
stopped, started and restarted at will (``pg_ctl``), so a test can take the database away
from a running process and give it back.

``initdb`` refuses to run as root, so as root the server runs as the ``postgres`` user
(``runuser``); its data dir is then owned by that user.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from leasehold.devserver import free_port

START_TIMEOUT_SECONDS = 30
SERVER_USER = "postgres"


def postgres_bin_dir() -> Path | None:
    """The newest installed PostgreSQL's binaries (``initdb``, ``pg_ctl``), or ``None``."""
    found = shutil.which("initdb")
    if found is not None:
        return Path(found).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(versions[-1]).parent if versions else None


class PrivatePostgres:
    """One server in a temporary directory; ``url`` is its ``test`` database."""

    def __init__(self, bin_dir: Path) -> None:
        self._bin = bin_dir
        self.port = free_port()
        # Not under a test's tmp_path: that is private to root, and the server runs as postgres.
        self.root = Path(tempfile.mkdtemp(prefix="leasehold-pg-"))
        self.data = self.root / "data"
        self.log_file = self.root / "server.log"
        self._as_root = os.geteuid() == 0
        if self._as_root:
            shutil.chown(self.root, SERVER_USER, SERVER_USER)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.root} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        (self.data / "leasehold.opts").write_text(options)
        self._options = options

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self._bin / tool), *args]
        if self._as_root:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=START_TIMEOUT_SECONDS * 2)

    def start(self) -> None:
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log_file), "-o", self._options,
            "-w", "-t", str(START_TIMEOUT_SECONDS), "start",
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: clients' connections are closed, as in a failover)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", str(START_TIMEOUT_SECONDS), "stop")

    def restart(self, mode: str = "fast") -> None:
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log_file), "-o", self._options, "-m", mode,
            "-w", "-t", str(START_TIMEOUT_SECONDS), "restart",
        )  # fmt: skip

    def running(self) -> bool:
        command = [str(self._bin / "pg_ctl"), "-D", str(self.data), "status"]
        if self._as_root:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        return subprocess.run(command, capture_output=True, timeout=30).returncode == 0

    def close(self) -> None:
        """Stop the server if it runs and delete its files."""
        try:
            if self.running():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
