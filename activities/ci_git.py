"""Per-repository bare mirrors (``git clone --mirror`` / ``git fetch``) under the data dir.

Never a working tree: workflow files are read with ``git ls-tree``/``git cat-file`` at the
commit, and jobs get ``git archive`` of it. One lock file per mirror serialises fetches between
threads and processes sharing the data dir.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

WORKFLOWS_DIR = ".github/workflows"
SHA = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
GIT_TIMEOUT_SECONDS = 600.0


class GitError(RuntimeError):
    """A git command failed (network, missing repository); may be transient."""


class InvalidRequest(ValueError):
    """A sha or clone URL that can never work."""


class CommitNotFound(GitError):
    """The commit is not in the repository even after a fetch."""


def _git_env() -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/"),
        "GIT_TERMINAL_PROMPT": "0",
        # No ext:: or fd:: transports from a tenant-supplied URL.
        "GIT_ALLOW_PROTOCOL": "file:git:http:https:ssh",
        "GIT_CONFIG_NOSYSTEM": "1",
        "LC_ALL": "C",
    }


def check_request(clone_url: str, sha: str) -> None:
    if not SHA.match(sha):
        raise InvalidRequest(f"not a full lower-case commit sha: {sha!r}")
    if not clone_url or clone_url.startswith("-") or "\n" in clone_url:
        raise InvalidRequest(f"invalid clone URL: {clone_url!r}")


def run_git(
    args: list[str],
    heartbeat: Callable[[], None] | None = None,
    cwd: Path | None = None,
    timeout: float = GIT_TIMEOUT_SECONDS,
) -> bytes:
    """Run git, heartbeating every second while it runs; raises ``GitError`` on failure."""
    proc = subprocess.Popen(
        ["git", *args],
        cwd=cwd,
        env=_git_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            out, err = proc.communicate(timeout=1.0)
            break
        except subprocess.TimeoutExpired:
            if heartbeat is not None:
                heartbeat()
            if time.monotonic() > deadline:
                proc.kill()
                proc.communicate()
                raise GitError(f"git {args[0]} timed out after {timeout:.0f}s") from None
    if proc.returncode != 0:
        raise GitError(f"git {args[0]} failed: {err.decode(errors='replace').strip()[-500:]}")
    return out


class GitMirror:
    """Bare mirrors of tenant repositories under one directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, repo_id: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", repo_id)[:64]
        return self.root / f"{safe}-{hashlib.sha256(repo_id.encode()).hexdigest()[:12]}.git"

    @contextmanager
    def _locked(self, repo_id: str) -> Iterator[None]:
        lock_path = self.path(repo_id).with_suffix(".lock")
        with open(lock_path, "a+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _clone_or_repoint(self, mirror: Path, clone_url: str, heartbeat: Callable[[], None] | None) -> bool:
        """Clone the mirror if it does not exist yet (True: it is fresh); else point its origin
        at ``clone_url`` (False), since the registered URL may have changed since the mirror was
        made. Callers hold the repository's lock."""
        if (mirror / "HEAD").exists():
            run_git(["remote", "set-url", "origin", "--", clone_url], cwd=mirror)
            return False
        tmp = mirror.with_name(mirror.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        run_git(["clone", "--mirror", "--quiet", "--", clone_url, str(tmp)], heartbeat)
        tmp.rename(mirror)
        return True

    def has_commit(self, mirror: Path, sha: str) -> bool:
        try:
            run_git(["cat-file", "-e", f"{sha}^{{commit}}"], cwd=mirror)
            return True
        except GitError:
            return False

    def ensure_commit(
        self, repo_id: str, clone_url: str, sha: str, heartbeat: Callable[[], None] | None = None
    ) -> Path:
        """The mirror path, holding ``sha`` (cloned or fetched as needed)."""
        check_request(clone_url, sha)
        mirror = self.path(repo_id)
        with self._locked(repo_id):
            self._clone_or_repoint(mirror, clone_url, heartbeat)
            if not self.has_commit(mirror, sha):
                run_git(["fetch", "--prune", "--quiet", "origin"], heartbeat, cwd=mirror)
            if not self.has_commit(mirror, sha):
                raise CommitNotFound(f"commit {sha} is not in {clone_url}")
        return mirror

    def fetch_heads(
        self, repo_id: str, clone_url: str, heartbeat: Callable[[], None] | None = None
    ) -> tuple[Path, dict[str, str]]:
        """Bring the mirror up to date; returns it and its branches' heads (name -> sha)."""
        check_request(clone_url, "0" * 40)
        mirror = self.path(repo_id)
        with self._locked(repo_id):
            if not self._clone_or_repoint(mirror, clone_url, heartbeat):
                run_git(["fetch", "--prune", "--quiet", "origin"], heartbeat, cwd=mirror)
            out = run_git(["for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/"], cwd=mirror)
        heads = {}
        for line in out.decode(errors="replace").splitlines():
            sha, _, ref = line.partition(" ")
            if SHA.match(sha) and ref.startswith("refs/heads/"):
                heads[ref[len("refs/heads/") :]] = sha
        return mirror, heads

    def workflow_files(self, mirror: Path, sha: str, max_bytes: int) -> list[tuple[str, bytes | None]]:
        """``(path, content)`` of ``.github/workflows/*.yml|yaml`` at ``sha``; content is
        ``None`` for a file larger than ``max_bytes``."""
        out = run_git(["ls-tree", "-z", "-l", sha, "--", f"{WORKFLOWS_DIR}/"], cwd=mirror)
        files: list[tuple[str, bytes | None]] = []
        for entry in out.split(b"\0"):
            if not entry:
                continue
            meta, _, path_b = entry.partition(b"\t")
            parts = meta.split()
            path = path_b.decode(errors="replace")
            if len(parts) < 4 or parts[1] != b"blob" or not path.endswith((".yml", ".yaml")):
                continue
            size = int(parts[3]) if parts[3].isdigit() else 0
            if size > max_bytes:
                files.append((path, None))
                continue
            files.append((path, run_git(["cat-file", "blob", parts[2].decode()], cwd=mirror)))
        return sorted(files)

    def archive(self, mirror: Path, sha: str, dest: Path, heartbeat: Callable[[], None] | None = None) -> None:
        """Extract the tree of ``sha`` into ``dest`` (no .git; paths can't leave ``dest``)."""
        check_request("x", sha)
        dest.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(
            ["git", "archive", "--format=tar", sha],
            cwd=mirror,
            env=_git_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                for member in tar:
                    # "tar" filter: no absolute paths, nothing outside dest (even via symlinks).
                    tar.extract(member, dest, filter="tar")
                    if heartbeat is not None:
                        heartbeat()
        except (tarfile.TarError, OSError) as exc:
            proc.kill()
            raise GitError(f"checkout of {sha} failed: {exc}") from exc
        finally:
            err = proc.stderr.read() if proc.stderr else b""
            code = proc.wait()
        if code != 0:
            raise GitError(f"git archive failed: {err.decode(errors='replace').strip()[-500:]}")
