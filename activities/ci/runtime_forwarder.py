"""Run inside a job's sandbox, as the job's user: ``python3 runtime_forwarder.py PORT SOCKET -- CMD...``.

Listens on ``127.0.0.1:PORT`` of the sandbox's own network namespace (which has nothing else)
and carries each connection to the Unix socket ``SOCKET`` (the attempt's artifact service,
``activities.ci.artifact_service``, bound into the sandbox), while it runs ``CMD`` and exits
with its status. Signals it gets go to ``CMD``. Standard library only: it runs under the
sandbox's ``/usr/bin/python3``, not leasehold's environment.
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


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            upstream.close()
            continue
        threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: runtime_forwarder.py PORT SOCKET -- CMD...", file=sys.stderr)
        return 2
    port, path, command = int(argv[0]), argv[1], argv[3:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        threading.Thread(target=_serve, args=(listener, path), daemon=True).start()
    except OSError as exc:
        # The step still runs; only the artifact service is out of reach.
        print(f"[leasehold] artifact service unavailable in this step: {exc}", file=sys.stderr)
    child = subprocess.Popen(command)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, _frame: child.send_signal(number))
    code = child.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
