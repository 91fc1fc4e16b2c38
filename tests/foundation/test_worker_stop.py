"""A worker process told to stop before it serves (still connecting, or loading its model)
exits with code 0, as one told to stop while serving does: a supervisor reads any other code
as a crash. Before, the signal's default action killed it (exit code -15)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

STARTED_WITHIN = 60.0
STOPPED_WITHIN = 20.0


def _silent_server() -> tuple[socket.socket, list[socket.socket]]:
    """A loopback listener that accepts connections and never answers: a Temporal frontend
    that hangs, so the worker stays in its connect step until it is told to stop."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    return listener, held


def test_sigterm_while_connecting_exits_zero(tmp_path: Path) -> None:
    listener, held = _silent_server()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_")}
    env |= {
        "LEASEHOLD_DATA_DIR": str(tmp_path / "data"),
        "LEASEHOLD_TEMPORAL_ADDRESS": f"127.0.0.1:{listener.getsockname()[1]}",
        "LEASEHOLD_METRICS_PORT": "0",
    }
    err = tmp_path / "worker.err"
    with err.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "worker", "orchestration"], env=env, stdout=sink, stderr=sink
        )
    try:
        deadline = time.monotonic() + STARTED_WITHIN
        # Its health server is up and it has opened a connection to the silent frontend.
        while not (held and "health and metrics on" in err.read_text(errors="replace")):
            assert proc.poll() is None, err.read_text(errors="replace")
            assert time.monotonic() < deadline, err.read_text(errors="replace")
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STOPPED_WITHIN) == 0, err.read_text(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        listener.close()
        for conn in held:
            conn.close()
