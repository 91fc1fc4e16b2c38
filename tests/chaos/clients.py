"""The clients of the chaos scenarios that run a mixed load through the API: every answer
counted (no 5xx but 503 with ``Retry-After``, no dropped connection), asks repeated as a client
would, videos submitted with idempotency keys into a checker history, status reads, and a CI
job's whole log read by sequence number."""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from testing.checker import History
from testing.stack import MODEL, SIZE, wait_until


@dataclass
class Answers:
    """Every answer the clients got, by status; what must never happen, with its detail."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    statuses: Counter[int] = field(default_factory=Counter)
    wrong: list[str] = field(default_factory=list)

    def seen(self, response: httpx.Response) -> None:
        request = response.request
        status = response.status_code
        with self.lock:
            self.statuses[status] += 1
        if status >= 500 and not (status == 503 and response.headers.get("retry-after")):
            response.read()
            with self.lock:
                self.wrong.append(f"{request.method} {request.url.path}: {status} {response.text[:300]}")

    def dropped(self, what: str, exc: Exception) -> None:
        with self.lock:
            self.wrong.append(f"{what}: {type(exc).__name__} {exc}")

    def client(self, base_url: str, key: str) -> httpx.Client:
        def hook(response: httpx.Response) -> None:
            self.seen(response)

        return httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
            event_hooks={"response": [hook]},
        )


def git(cwd: Path, *args: str) -> str:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "GIT_AUTHOR_NAME": "c", "GIT_AUTHOR_EMAIL": "c@x"}
    env.update({"GIT_COMMITTER_NAME": "c", "GIT_COMMITTER_EMAIL": "c@x"})
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout.strip()


def until_ok(http: httpx.Client, method: str, path: str, answers: Answers, within: float = 120, **kw: Any) -> Any:
    """Ask until a 2xx (503 with Retry-After waited for, as a client would); its JSON."""
    deadline = time.monotonic() + within
    while True:
        try:
            response = http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            answers.dropped(f"{method} {path}", exc)
        else:
            if response.is_success:
                return response.json()
            assert response.status_code in (503, 429), f"{method} {path}: {response.status_code} {response.text}"
            time.sleep(float(response.headers.get("retry-after", "1")))
        assert time.monotonic() < deadline, f"{method} {path} never answered"


def submit_videos(http: httpx.Client, history: History, answers: Answers, keys: list[str], pace: float) -> None:
    """Submit each key until acknowledged or refused (as ``VideoClient.submit``), ``pace`` apart."""
    for key in keys:
        body = {"prompt": f"chaos {key}", "model": MODEL, "seconds": "1", "size": SIZE, "steps": 20}
        deadline = time.monotonic() + 120
        while True:
            history.invoke(key, "c1")
            try:
                response = http.post("/v1/videos", json=body, headers={"Idempotency-Key": key})
            except httpx.HTTPError as exc:
                answers.dropped("POST /v1/videos", exc)
                history.info(key, "c1", type(exc).__name__)
            else:
                if response.status_code == 200:
                    history.ok(key, "c1", str(response.json()["id"]))
                    break
                if 400 <= response.status_code < 500 and response.status_code not in (408, 429):
                    history.fail(key, "c1", f"{response.status_code} {response.text[:200]}")
                    break
                # Nothing was written: the submit is asked again after the delay it was given.
                history.info(key, "c1", str(response.status_code))
                time.sleep(float(response.headers.get("retry-after", "0.5")))
                continue
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        time.sleep(pace)


def read_statuses(http: httpx.Client, answers: Answers, repo_id: str, stop: threading.Event) -> None:
    """Status reads of videos and runs, as clients poll them, until ``stop``."""
    while not stop.is_set():
        for path in ("/v1/videos", f"/v1/runs?repo={repo_id}"):
            try:
                response = http.get(path)
                if response.is_success and path == "/v1/videos":
                    for video in response.json()["data"][:3]:
                        http.get(f"/v1/videos/{video['id']}")
                if response.is_success and path.startswith("/v1/runs"):
                    for run in response.json()["data"][:2]:
                        http.get(f"/v1/runs/{run['id']}")
            except httpx.HTTPError as exc:
                answers.dropped(f"GET {path}", exc)
        stop.wait(0.25)


def log_pages(http: httpx.Client, answers: Answers, run_id: str, job_id: str) -> Iterator[dict[str, Any]]:
    """The pages of a job's final attempt's log, read by sequence number to its end."""
    from_seq = 0
    for _page in range(100):
        page = until_ok(http, "GET", f"/v1/runs/{run_id}/jobs/{job_id}/logs", answers, params={"from_seq": from_seq})
        yield page
        if not page["has_more"]:
            return
        from_seq = page["next_seq"]
    raise AssertionError("the log did not end")


def full_log(http: httpx.Client, answers: Answers, run_id: str, job_id: str) -> tuple[list[str], list[int]]:
    """Every line of a job's final attempt's log and the gaps it records."""
    lines: list[str] = []
    gaps: list[int] = []
    for page in log_pages(http, answers, run_id, job_id):
        for chunk in page["chunks"]:
            lines.extend(chunk["text"].splitlines())
        gaps.extend(page["gaps"])
    return lines, gaps


def listed_videos(http: httpx.Client, answers: Answers) -> list[dict[str, Any]]:
    """The caller's videos, oldest first (a scenario's are at most 100)."""
    return until_ok(http, "GET", "/v1/videos", answers, params={"limit": 100, "order": "asc"})["data"]


def wait_settled(
    http: httpx.Client, answers: Answers, run_ids: list[str], within: float, video_interval: float = 0.2
) -> None:
    """Until every video and every CI run of the scenario has reached a final state."""

    def runs_done() -> bool:
        found = [until_ok(http, "GET", f"/v1/runs/{r}", answers) for r in run_ids]
        return all(r["status"] in ("success", "failure", "cancelled") for r in found)

    wait_until(
        lambda: all(v["status"] in ("completed", "failed", "cancelled") for v in listed_videos(http, answers)),
        within,
        "the videos",
        video_interval,
    )
    wait_until(runs_done, within, "the CI runs", 1.0)
