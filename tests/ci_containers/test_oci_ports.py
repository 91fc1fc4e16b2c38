"""Services' mapped ports: which local port each gets, and the forwarder each step starts with.

The forwarder runs here as a real process (as it does in a step's container): it listens on
loopback, hands connections to the service's address, and runs the step.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from activities.ci.sandbox import SandboxError
from testing.harness import free_port
from worker_ci.oci_ports import EPHEMERAL_FIRST, forwarding_argv, published_ports


def test_host_sides_are_kept_and_bare_ports_map_to_themselves_where_free() -> None:
    found = published_ports([("db", ["15432:5432", "9000"]), ("cache", ["6379"]), ("db2", ["5432", "9000"])])
    assert found == {
        "db": {"5432": 15432, "9000": 9000},
        "cache": {"6379": 6379},
        # 5432 is free on loopback (db's is at 15432); 9000 is db's, so db2's goes high.
        "db2": {"5432": 5432, "9000": EPHEMERAL_FIRST},
    }


def test_two_services_asking_for_one_host_port_are_refused_naming_both() -> None:
    with pytest.raises(SandboxError, match=r"services\.b\.ports: 5432 is already mapped for service a"):
        published_ports([("a", ["5432:5432"]), ("b", ["5432:5433"])])


def test_no_forwards_leave_the_step_as_it_is() -> None:
    assert forwarding_argv("/usr/bin/python3", [], ["bash", "-e", "step.sh"]) == ["bash", "-e", "step.sh"]


@pytest.fixture
def echo_server() -> Iterator[int]:
    """A loopback service that answers each connection with what it sent, upper-cased."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(conn.recv(1024).upper())

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def test_the_forwarder_passes_connections_on_and_exits_with_the_steps_status(echo_server: int) -> None:
    local = free_port()
    step = [
        sys.executable,
        "-c",
        "import socket, sys\n"
        f"s = socket.create_connection(('127.0.0.1', {local}), timeout=5)\n"
        "s.sendall(b'ping'); print(s.recv(16).decode()); sys.exit(7)",
    ]
    argv = forwarding_argv(sys.executable, [(local, "127.0.0.1", echo_server)], step)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 7, done.stderr
    assert done.stdout.split() == ["PING"]


def test_a_port_the_step_cannot_have_is_said_and_the_step_still_runs(echo_server: int) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        argv = forwarding_argv(sys.executable, [(port, "127.0.0.1", echo_server)], ["true"])
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0
    assert f"127.0.0.1:{port} is unavailable in this step" in done.stderr
