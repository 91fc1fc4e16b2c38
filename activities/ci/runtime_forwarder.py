"""Run inside a job's sandbox, as the job's user: ``python3 runtime_forwarder.py PORT=TARGET... -- CMD...``.

Listens on ``127.0.0.1:PORT`` of the sandbox's own network namespace and carries each connection
to ``TARGET``, while it runs ``CMD`` and exits with its status; signals it gets go to ``CMD``.
A target is a Unix socket path (the attempt's artifact service, ``activities.ci.artifact_service``,
bound into a bubblewrap sandbox) or ``HOST:PORT`` (a service container's address, for an OCI job
on the runner: ``worker_ci.oci_ports``). Standard library only: it runs under the sandbox's
``/usr/bin/python3``, not leasehold's environment (the OCI backend passes its text with ``-c``).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    finally:
        try:
            target.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _connect(target: str) -> socket.socket:
    if target.startswith("/"):
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(target)
        except OSError:
            upstream.close()
            raise
        return upstream
    host, _, port = target.rpartition(":")
    upstream = socket.create_connection((host, int(port)), timeout=10)
    upstream.settimeout(None)
    return upstream


def _serve(listener: socket.socket, target: str) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        try:
            upstream = _connect(target)
        except OSError:
            client.close()
            continue
        threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()


def _listen(port: int, target: str) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
    except OSError as exc:
        # The step still runs; only what this port leads to is out of reach.
        listener.close()
        print(f"[leasehold] 127.0.0.1:{port} is unavailable in this step: {exc}", file=sys.stderr)
        return
    threading.Thread(target=_serve, args=(listener, target), daemon=True).start()


def main(argv: list[str]) -> int:
    cut = argv.index("--") if "--" in argv else -1
    maps, command = argv[:cut], argv[cut + 1 :]
    if cut < 1 or not command or not all("=" in m and m.partition("=")[0].isdigit() for m in maps):
        print("usage: runtime_forwarder.py PORT=TARGET... -- CMD...", file=sys.stderr)
        return 2
    for item in maps:
        port, _, target = item.partition("=")
        _listen(int(port), target)
    child = subprocess.Popen(command)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, _frame: child.send_signal(number))
    code = child.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
