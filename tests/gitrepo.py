"""A real git remote for tests: a bare repository whose ``post-receive`` hook delivers a
GitHub-format, HMAC-signed push webhook to the API, as a git host would.

Every delivery (headers, raw body, the API's status and answer) is appended to
``deliveries.jsonl`` beside the bare repository, so a test can replay one byte for byte.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ZERO_SHA = "0" * 40

# The hook runs under this interpreter; stdlib only, so it needs nothing installed.
_HOOK = r"""
import hashlib, hmac, json, sys, urllib.error, urllib.request, uuid
from pathlib import Path

URL = {url!r}
SECRET = {secret!r}.encode()
FULL_NAME = {full_name!r}
REPO_ID = {repo_id!r}
CLONE_URL = {clone_url!r}
LOG = Path({log!r})
ZERO = "0" * 40

for line in sys.stdin:
    parts = line.split()
    if len(parts) != 3:
        continue
    before, after, ref = parts
    payload = {{
        "ref": ref,
        "before": before,
        "after": after,
        "created": before == ZERO,
        "deleted": after == ZERO,
        "forced": False,
        "repository": {{
            "id": REPO_ID,
            "name": FULL_NAME.rsplit("/", 1)[-1],
            "full_name": FULL_NAME,
            "clone_url": CLONE_URL,
        }},
        "head_commit": None if after == ZERO else {{"id": after}},
        "pusher": {{"name": "tester"}},
    }}
    body = json.dumps(payload).encode()
    headers = {{
        "Content-Type": "application/json",
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest(),
    }}
    request = urllib.request.Request(URL, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, answer = response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        status, answer = exc.code, exc.read().decode()
    except OSError as exc:
        status, answer = 0, repr(exc)
    with LOG.open("a") as f:
        f.write(json.dumps({{"headers": headers, "body": body.decode(), "status": status, "answer": answer}}) + "\n")
    print(f"webhook {{ref}} {{after[:12]}} -> {{status}}")
"""


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run git with a fixed identity and no user/system config leaking in."""
    env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "Test",
        "GIT_AUTHOR_EMAIL": "test@example.invalid",
        "GIT_COMMITTER_NAME": "Test",
        "GIT_COMMITTER_EMAIL": "test@example.invalid",
        "GIT_TERMINAL_PROMPT": "0",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=check, capture_output=True, text=True, timeout=60)


@dataclass
class Delivery:
    """One webhook the hook sent: replayable exactly."""

    headers: dict[str, str]
    body: bytes
    status: int
    answer: str


class GitRemote:
    """A bare repository (the "host") plus a working clone to commit and push from."""

    def __init__(self, root: Path, branch: str = "main") -> None:
        self.root = root
        self.bare = root / "origin.git"
        self.work = root / "work"
        self.branch = branch
        self.deliveries_path = root / "deliveries.jsonl"
        root.mkdir(parents=True, exist_ok=True)
        git(root, "init", "--bare", "--initial-branch", branch, str(self.bare))
        git(root, "init", "--initial-branch", branch, str(self.work))
        git(self.work, "remote", "add", "origin", str(self.bare))

    @property
    def clone_url(self) -> str:
        return f"file://{self.bare}"

    def install_webhook(self, url: str, secret: str, full_name: str, repo_id: str | int | None = None) -> None:
        """Make every push deliver a signed ``push`` webhook to ``url``."""
        source = _HOOK.format(
            url=url,
            secret=secret,
            full_name=full_name,
            repo_id=repo_id,
            clone_url=self.clone_url,
            log=str(self.deliveries_path),
        )
        hook = self.bare / "hooks" / "post-receive"
        hook.write_text(f"#!{sys.executable}\n" + textwrap.dedent(source))
        hook.chmod(0o755)

    def write(self, path: str, text: str) -> None:
        target = self.work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text))

    def commit(self, message: str = "change") -> str:
        """Commit everything in the working clone; returns the new commit's sha."""
        git(self.work, "add", "-A")
        git(self.work, "commit", "--allow-empty", "-q", "-m", message)
        return git(self.work, "rev-parse", "HEAD").stdout.strip()

    def push(self, *refspecs: str) -> subprocess.CompletedProcess[str]:
        """A real ``git push`` (the post-receive hook fires during it)."""
        return git(self.work, "push", "-q", "origin", *(refspecs or (f"HEAD:refs/heads/{self.branch}",)))

    def deliveries(self) -> list[Delivery]:
        if not self.deliveries_path.exists():
            return []
        out = []
        for line in self.deliveries_path.read_text().splitlines():
            record = json.loads(line)
            out.append(Delivery(record["headers"], record["body"].encode(), record["status"], record["answer"]))
        return out
