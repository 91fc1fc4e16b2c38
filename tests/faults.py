"""Fault injection on loopback: a TCP proxy that can be cut and restored.

Put it between a process and a server it depends on (e.g. a worker and the S3 server) by
giving the process the proxy's address. ``cut()`` resets every open connection and answers
new ones with a reset (the server is "unreachable", the way a dropped route or a dead load
balancer looks to a client); ``restore()`` forwards again. Both the chaos suite and the
benchmarks use it. Listens on 127.0.0.1 only.
"""

from __future__ import annotations

import logging
import selectors
import socket
import struct
import threading
import time

log = logging.getLogger(__name__)

_BUFFER = 64 * 1024


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), as a vanished peer would look."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class TcpProxy:
    """Forwards 127.0.0.1:<port> to ``target``; ``cut()``/``restore()`` inject an outage."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._cut = False
        self._closed = False
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        # What happened, for the test's report: connections forwarded and refused while cut.
        self.forwarded = 0
        self.refused = 0
        self.cut_at: float | None = None
        self.restored_at: float | None = None
        self._thread = threading.Thread(target=self._accept_loop, name=f"proxy-{self.port}", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def is_cut(self) -> bool:
        return self._cut

    def cut(self) -> None:
        """From now on the target is unreachable: open connections are reset, new ones refused."""
        with self._lock:
            self._cut = True
            self.cut_at = time.monotonic()
            pairs, self._pairs = self._pairs, []
        for client, upstream in pairs:
            _reset(client)
            _reset(upstream)

    def restore(self) -> None:
        with self._lock:
            self._cut = False
            self.restored_at = time.monotonic()

    def close(self) -> None:
        self._closed = True
        self.cut()
        try:
            self._listener.close()
        except OSError:
            pass

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _addr = self._listener.accept()
            except OSError:
                return
            if self._cut:
                self.refused += 1
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                if self._cut:
                    self.refused += 1
                    _reset(client)
                    _reset(upstream)
                    continue
                self._pairs.append((client, upstream))
                self.forwarded += 1
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        try:
            client.setblocking(False)
            upstream.setblocking(False)
            sel.register(client, selectors.EVENT_READ, upstream)
            sel.register(upstream, selectors.EVENT_READ, client)
            while True:
                ready = sel.select(timeout=1.0)
                if self._closed:
                    return
                for key, _mask in ready:
                    src: socket.socket = key.fileobj  # type: ignore[assignment]
                    dst: socket.socket = key.data
                    data = src.recv(_BUFFER)
                    if not data:
                        return
                    dst.setblocking(True)
                    dst.sendall(data)
                    dst.setblocking(False)
        except OSError:
            return
        finally:
            sel.close()
            with self._lock:
                if (client, upstream) in self._pairs:
                    self._pairs.remove((client, upstream))
            for sock in (client, upstream):
                try:
                    sock.close()
                except OSError:
                    pass
