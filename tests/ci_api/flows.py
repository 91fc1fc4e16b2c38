"""Client-side flows of the CI end-to-end tests (ci_api and ci_tenancy): push a workflow for
real, wait for pushes and runs, read logs and event streams."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from api.ci.signatures import signature_of
from tests.ci_api.conftest import CIStack
from tests.gitrepo import GitRemote, git
from workflows.ci.ids import push_id, run_id

WORKFLOW_PATH = ".github/workflows/ci.yml"
TERMINAL = {"success", "failure", "cancelled"}


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 90.0, interval: float = 0.3) -> Any:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


@dataclass
class Pushed:
    client: httpx.Client
    remote: GitRemote
    repo_id: str
    name: str
    secret: str
    sha: str
    push_id: str
    run_id: str


def done_push(client: httpx.Client, pid: str) -> dict | None:
    response = client.get(f"/v1/pushes/{pid}")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] != "failed", body
    return body if body["status"] == "done" else None


def runs_of_push(client: httpx.Client, answer: str) -> list[str]:
    """Run ids of the (single) push a webhook answer names, once listed."""
    pid = json.loads(answer)["pushes"][0]["id"]
    push = wait_for("the push to list its runs", lambda: done_push(client, pid))
    return [r["run_id"] for r in push["runs"]]


def push_workflow(
    stack: CIStack,
    yaml_text: str,
    *,
    client: httpx.Client | None = None,
    before_push: Callable[[httpx.Client, str], None] | None = None,
    files: dict[str, str] | None = None,
    name: str | None = None,
    binary_files: dict[str, bytes] | None = None,
) -> Pushed:
    """A fresh repository with one workflow file, pushed for real to main; waits until its one
    run exists. ``before_push(client, repo_id)`` runs after registration (e.g. to store secrets)."""
    client = client or stack.new_tenant()
    remote = stack.git_remote()
    repo_id, name, secret = stack.register(client, remote, name=name)
    if before_push is not None:
        before_push(client, repo_id)
    remote.write(WORKFLOW_PATH, yaml_text)
    for path, text in (files or {}).items():
        remote.write(path, text)
    for path, data in (binary_files or {}).items():
        (remote.work / path).parent.mkdir(parents=True, exist_ok=True)
        (remote.work / path).write_bytes(data)
    sha = remote.commit("ci")
    remote.push()
    (delivery,) = remote.deliveries()
    assert delivery.status == 202, delivery.answer
    pid = json.loads(delivery.answer)["pushes"][0]["id"]
    assert pid == push_id(repo_id, sha, "refs/heads/main")
    push = wait_for("the push to list its runs", lambda: done_push(client, pid))
    assert [r["workflow_path"] for r in push["runs"]] == [WORKFLOW_PATH]
    rid = push["runs"][0]["run_id"]
    assert rid == run_id(repo_id, sha, WORKFLOW_PATH)
    return Pushed(client, remote, repo_id, name, secret, sha, pid, rid)


def get_run(client: httpx.Client, rid: str) -> dict:
    response = client.get(f"/v1/runs/{rid}")
    assert response.status_code == 200, response.text
    return response.json()


def wait_run(client: httpx.Client, rid: str, statuses: set[str] = TERMINAL, timeout: float = 120.0) -> dict:
    return wait_for(
        f"run {rid} in {statuses}", lambda: (r := get_run(client, rid))["status"] in statuses and r, timeout
    )


def job(run: dict, job_id: str) -> dict:
    return next(j for j in run["jobs"] if j["id"] == job_id)


def log_text(client: httpx.Client, rid: str, job_id: str, attempt: int | None = None) -> str:
    params: dict[str, Any] = {}
    if attempt is not None:
        params["attempt"] = attempt
    page = client.get(f"/v1/runs/{rid}/jobs/{job_id}/logs", params=params)
    assert page.status_code == 200, page.text
    return "".join(c["text"] for c in page.json()["chunks"])


def sse_events(
    client: httpx.Client, url: str, *, stop_after: int | None = None, headers: dict[str, str] | None = None
) -> list[tuple[str | None, str, dict]]:
    """(id, event, data) of a stream's events, until it ends or ``stop_after`` log events."""
    events: list[tuple[str | None, str, dict]] = []
    logs = 0
    with client.stream("GET", url, headers=headers or {}, timeout=httpx.Timeout(60, read=60)) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        event_id, kind, data = None, "message", ""
        for line in response.iter_lines():
            if line.startswith("id:"):
                event_id = line[3:].strip()
            elif line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:"):
                data = line[5:].strip()
            elif line == "" and data:
                events.append((event_id, kind, json.loads(data)))
                logs += kind == "log"
                if kind == "end" or (stop_after is not None and logs >= stop_after):
                    break
                event_id, kind, data = None, "message", ""
    return events


def sse_text(client: httpx.Client, rid: str, job_id: str) -> str:
    """Every ``log`` event's text of a finished job's stream."""
    events = sse_events(client, f"/v1/runs/{rid}/jobs/{job_id}/logs/stream")
    return "".join(data["text"] for _, kind, data in events if kind == "log")


def push_from_fork(stack: CIStack, remote: GitRemote, repo_id: str, number: int) -> str:
    """Someone else's clone of ``remote`` with a commit of their own, which the host publishes
    in the base repository as ``refs/pull/<number>/head``; returns the head commit."""
    fork = GitRemote(stack.root / f"fork-{repo_id}")
    git(fork.work, "pull", "-q", str(remote.bare), "main")
    fork.write("evil.sh", "echo exfiltrate\n")
    head = fork.commit("from the fork")
    git(fork.work, "push", "-q", str(remote.bare), f"HEAD:refs/pull/{number}/head")
    return head


def pull_request_payload(number: int, sha: str, head_repo: str, base_repo: str) -> bytes:
    return json.dumps(
        {
            "action": "opened",
            "number": number,
            "pull_request": {
                "number": number,
                "head": {"sha": sha, "ref": "feature", "repo": {"full_name": head_repo}},
                "base": {"ref": "main", "repo": {"full_name": base_repo}},
            },
            "repository": {"full_name": base_repo},
        }
    ).encode()


def deliver(stack: CIStack, secret: str, event: str, body: bytes) -> httpx.Response:
    """A webhook delivery signed with the repository's secret, as GitHub sends it."""
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": "test-delivery",
        "X-Hub-Signature-256": signature_of(secret, body),
    }
    return httpx.post(f"{stack.base_url}/v1/hooks/github", content=body, headers=headers, timeout=30)
