"""A tiny HTTP endpoint for worker processes: ``/metrics`` (Prometheus) and ``/healthz``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest


def serve_health(host: str, port: int, is_healthy: Callable[[], bool]) -> ThreadingHTTPServer:
    """Serve in a daemon thread; returns the server (its bound port is ``server_address[1]``)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                body, ctype, status = generate_latest(), CONTENT_TYPE_LATEST, 200
            elif self.path == "/healthz":
                ok = is_healthy()
                body = b'{"status":"ok"}' if ok else b'{"status":"starting"}'
                ctype, status = "application/json", 200 if ok else 503
            else:
                body, ctype, status = b'{"error":"not found"}', "application/json", 404
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # quiet
            return

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="health-http", daemon=True).start()
    return server
