"""One stack for issue 15's previews and webhooks tests: API, orchestration and GPU workers as
real processes, with previews on, webhooks allowed to 127.0.0.1, and steps paced so a job is
seen mid-way. Shared by tests/video_previews and tests/video_webhooks (started once a session).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from testing.process_stack import ORCHESTRATION, ProcessStack, gpu_worker

MODEL = "procedural-v1"
SIZE = "180x320"
PREVIEW_EVERY = 10
PREVIEW_MAX_SIDE = 128
# One second of procedural-v1 is 8 frames x 0.0576 MP: about 0.09 s a step, so a 40-step job
# runs about four seconds, long enough for the SSE stream (at most a describe a second) to see
# its previews however idle the host is.
PACE = 0.2


@dataclass
class Stack(ProcessStack):
    def caller(self, tenant_id: str | None = None) -> httpx.Client:
        """An HTTP client with a fresh API key (a fresh tenant unless one is given)."""
        return self.http(self.new_key(tenant_id)[1])


def create_video(client: httpx.Client, steps: int, prompt: str = "a red kite over the sea") -> dict[str, Any]:
    body = {"prompt": prompt, "model": MODEL, "seconds": "1", "size": SIZE, "steps": steps}
    response = client.post("/v1/videos", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def wait_until(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll ``check`` until it returns something truthy; fails naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout}s")


@contextmanager
def running_stack(temporal_address: str, root: Path) -> Iterator[Stack]:
    """The stack, with its settings; the session starts it once for both packages."""
    with Stack.running(
        temporal_address,
        root,
        ORCHESTRATION,
        gpu_worker(MODEL),
        checkpoint_interval_seconds=2.0,
        video_preview_every_steps=PREVIEW_EVERY,
        video_preview_max_side=PREVIEW_MAX_SIDE,
        video_step_pace_seconds_per_frame_megapixel=PACE,
        video_webhook_schemes=["http", "https"],
        video_webhook_allow_cidrs=["127.0.0.1/32"],
        video_webhook_timeout_seconds=3.0,
        lifecycle_schedules=False,
    ) as stack:
        yield stack


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


class Receiver:
    """A real HTTP receiver on a loopback address; each path answers as the test configures."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.requests: list[Received] = []
        # path -> list of statuses answered in turn (the last one repeats)
        self.statuses: dict[str, list[int]] = {}
        self.redirects: dict[str, str] = {}
        self.huge: set[str] = set()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(min(length, 1 << 20))
                with receiver._lock:
                    receiver.requests.append(
                        Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.time())
                    )
                    statuses = receiver.statuses.get(self.path, [204])
                    status = statuses.pop(0) if len(statuses) > 1 else statuses[0]
                if self.path in receiver.redirects:
                    self.send_response(302)
                    self.send_header("Location", receiver.redirects[self.path])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path in receiver.huge:
                    # Claims a gigabyte and keeps sending until the client hangs up.
                    self.send_response(200)
                    self.send_header("Content-Length", str(1 << 30))
                    self.end_headers()
                    chunk = b"x" * 65536
                    try:
                        for _ in range((1 << 30) // len(chunk)):
                            self.wfile.write(chunk)
                    except OSError:
                        return
                    return
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.host = host
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def at(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
