"""Per-repository bare mirrors (``git clone --mirror`` / ``git fetch``) under the data dir.

Never a working tree: workflow files are read with ``git ls-tree``/``git cat-file`` at the
commit, and jobs get ``git archive`` of it. One lock file per mirror serialises fetches between
threads and processes sharing the data dir.

Clone URLs are the tenant's choice, so every clone and fetch checks the URL again against the
operator's ``ClonePolicy`` (``leasehold.clone_urls``): a local path is handed to git as its
checked real path; a remote host is resolved here, every address checked, and git is pinned to
those addresses (``http.curloptResolve``) so it cannot resolve the name again to another one.
Git runs with a clean environment (no proxies, no credentials, no user or system config) and
only the one protocol the URL needs. What git prints stays in the worker's log: tenants get
the same message whatever the host or path really is.
"""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import logging
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from actions_language.inputs import DISPATCH_REF
from leasehold.clone_urls import (
    ClonePolicy,
    CloneUrlRefused,
    LocalRepo,
    RemoteRepo,
    Resolver,
    parse,
    resolve_checked,
    system_resolver,
)
from leasehold.settings import Settings

log = logging.getLogger(__name__)

WORKFLOWS_DIR = ".github/workflows"
SHA = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
# A branch's full ref, without what git would read as a revision expression (``^``, ``~``,
# ``:``, ``..``, ``@{``) or a wildcard: a pull request's base comes from the webhook body.
BRANCH_REF = re.compile(r"^refs/heads/(?!.*(?:\.\.|@\{))[A-Za-z0-9._/+-]{1,240}$")
GIT_TIMEOUT_SECONDS = 600.0
# What a tenant is told when git fails: the same for a missing path, a closed port, a refused
# TLS handshake or a repository that is not there, so failures probe nothing.
FETCH_FAILED = "the repository could not be fetched"
# Entries of a local repository's git dir that may hold links to other repositories' objects.
_LINK_FILES = ("objects/info/alternates", "objects/info/http-alternates", "commondir")
_MAX_ENTRIES_CHECKED = 4096


class GitError(RuntimeError):
    """A git command failed (network, missing repository); may be transient. The message is
    safe to show the tenant; what git said is logged, never carried here."""


class InvalidRequest(ValueError):
    """A sha or clone URL that can never work."""


class CommitNotFound(GitError):
    """The commit is not in the repository even after a fetch."""


def _git_env(allow_protocol: str = "") -> dict[str, str]:
    # Built from nothing, so no proxy, askpass, credential or config variable of the worker's
    # environment reaches git. HOME points nowhere: curl would read ~/.netrc for any host.
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/nonexistent",
        "GIT_TERMINAL_PROMPT": "0",
        # Overrides protocol.*.allow: only the protocol this URL needs; never ext:: or fd::.
        "GIT_ALLOW_PROTOCOL": allow_protocol,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "LC_ALL": "C",
    }


def check_request(clone_url: str, sha: str) -> None:
    if not SHA.match(sha):
        raise InvalidRequest(f"not a full lower-case commit sha: {sha!r}")
    if not clone_url or clone_url.startswith("-") or "\n" in clone_url:
        raise InvalidRequest("invalid clone URL")


def run_git(
    args: list[str],
    heartbeat: Callable[[], None] | None = None,
    cwd: Path | None = None,
    timeout: float = GIT_TIMEOUT_SECONDS,
    config: list[str] | None = None,
    allow_protocol: str = "",
    failure: str | None = None,
) -> bytes:
    """Run git, heartbeating every second while it runs; raises ``GitError`` on failure.

    ``config`` is ``-c`` pairs for this command; ``failure`` the tenant-safe message of a
    failure (default: which git command failed). stderr is logged, never raised.
    """
    flags = [part for pair in (config or []) for part in ("-c", pair)]
    proc = subprocess.Popen(
        ["git", *flags, *args],
        cwd=cwd,
        env=_git_env(allow_protocol),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    message = failure or f"git {args[0]} failed"
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
                log.warning("git %s timed out after %.0fs (cwd %s)", " ".join(args), timeout, cwd)
                raise GitError(message) from None
    if proc.returncode != 0:
        log.warning(
            "git %s failed (exit %s, cwd %s): %s",
            " ".join(args),
            proc.returncode,
            cwd,
            err.decode(errors="replace").strip()[-2000:],
        )
        raise GitError(message)
    return out


# Longest path read back from a diff listing (Linux's PATH_MAX): bounds the bytes read.
MAX_PATH_BYTES = 4096


def _bounded_names(args: list[str], cwd: Path, limit: int) -> list[str] | None:
    """NUL-separated names git prints for ``args``; ``None`` past ``limit`` names or on failure."""
    proc = subprocess.Popen(
        ["git", *args],
        cwd=cwd,
        env=_git_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    budget = (limit + 1) * (MAX_PATH_BYTES + 1)
    data = b""
    too_many = False
    # A diff that hangs (a huge or damaged repository) is killed like any other git command.
    timer = threading.Timer(GIT_TIMEOUT_SECONDS, proc.kill)
    timer.start()
    try:
        while chunk := proc.stdout.read(65536):
            data += chunk
            if data.count(b"\0") > limit or len(data) > budget:
                too_many = True
                break
    finally:
        timer.cancel()
        if too_many:
            proc.kill()
        _, err = proc.communicate()
    if too_many:
        return None
    if proc.returncode != 0:
        log.warning("git %s failed in %s: %s", " ".join(args), cwd, err.decode(errors="replace").strip()[-2000:])
        return None
    return [name.decode(errors="replace") for name in data.split(b"\0") if name]


def _curl_address(address: str) -> str:
    return f"[{address}]" if ipaddress.ip_address(address).version == 6 else address


class GitMirror:
    """Bare mirrors of tenant repositories under one directory.

    ``policy`` is the operator's clone URL policy; a mirror built without one reads this
    process's settings (``worker_ci`` builds it from the settings the worker started with).
    Local paths inside ``root`` (other repositories' mirrors) are refused either way.
    """

    def __init__(self, root: Path, policy: ClonePolicy | None = None, resolver: Resolver = system_resolver) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.policy = (policy or ClonePolicy.from_settings(Settings())).forbidding(root)
        self._resolver = resolver

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

    def source(self, clone_url: str) -> tuple[str, list[str], str]:
        """Check ``clone_url`` now: the URL git is given, its ``-c`` config and the one protocol
        it may use. Raises ``InvalidRequest`` with a reason the tenant may see."""
        try:
            target = parse(clone_url, self.policy)
            if isinstance(target, RemoteRepo):
                return self._remote_source(target)
        except CloneUrlRefused as exc:
            log.warning("clone URL %r refused: %s", clone_url, exc.detail)
            raise InvalidRequest(exc.reason) from None
        return self._local_source(target, clone_url)

    def _remote_source(self, target: RemoteRepo) -> tuple[str, list[str], str]:
        addresses = resolve_checked(target, self.policy, self._resolver)
        config = [
            "protocol.allow=never",
            f"protocol.{target.scheme}.allow=always",
            # A redirect could lead anywhere, a private address included: git must not follow.
            "http.followRedirects=false",
            "http.proxy=",
            "credential.helper=",
            "core.askPass=",
        ]
        if not target.ip_literal:
            # Pinned: git connects to the addresses checked above and never resolves the name
            # itself, so an answer that changes meanwhile (DNS rebinding) is never used.
            pinned = ",".join(_curl_address(a) for a in addresses)
            config.append(f"http.curloptResolve={target.host}:{target.port}:{pinned}")
        return target.url, config, target.scheme

    def _local_source(self, target: LocalRepo, clone_url: str) -> tuple[str, list[str], str]:
        why = self._local_layout_refusal(target.path)
        if why is not None:
            log.warning("clone URL %r refused: %s", clone_url, why)
            raise InvalidRequest(FETCH_FAILED)
        return str(target.path), ["protocol.allow=never", "protocol.file.allow=always"], "file"

    def _local_layout_refusal(self, path: Path) -> str | None:
        """Why git must not read the repository at ``path`` (the checked real path): files that
        point git at another repository's objects, or links out of the local root."""
        root = self.policy.local_root
        if root is None:
            return "local paths are disabled"
        git_dir = path / ".git" if (path / ".git").exists() or (path / ".git").is_symlink() else path
        if git_dir != path and not git_dir.is_dir():
            return "a .git file (gitdir link) names another directory"
        for name in _LINK_FILES:
            if (git_dir / name).exists() or (git_dir / name).is_symlink():
                return f"{name} points git at other object stores"
        real_root = Path(os.path.realpath(root))
        forbidden = [Path(os.path.realpath(d)) for d in self.policy.forbidden_dirs]
        for directory in (git_dir, git_dir / "objects", git_dir / "objects" / "pack", git_dir / "refs"):
            try:
                entries = os.scandir(directory)
            except OSError:
                continue
            with entries:
                for count, entry in enumerate(entries):
                    if count >= _MAX_ENTRIES_CHECKED:
                        break
                    if not entry.is_symlink():
                        continue
                    real = Path(os.path.realpath(entry.path))
                    if not real.is_relative_to(real_root) or any(real.is_relative_to(d) for d in forbidden):
                        return f"{entry.path} links out of the local root"
        return None

    def _clone_or_repoint(
        self, mirror: Path, source: tuple[str, list[str], str], heartbeat: Callable[[], None] | None
    ) -> bool:
        """Clone the mirror if it does not exist yet (True: it is fresh); else point its origin
        at the checked URL (False), since the registered URL (or, for a local path, what it
        resolves to) may have changed since the mirror was made. Callers hold the lock."""
        url, config, protocol = source
        if (mirror / "HEAD").exists():
            run_git(["remote", "set-url", "origin", "--", url], cwd=mirror)
            return False
        tmp = mirror.with_name(mirror.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        # --no-local: git's transport reads a local repository, not its files through hard links
        # or copies (which follow what its object directory links to).
        local = ["--no-local"] if protocol == "file" else []
        run_git(
            ["clone", "--mirror", "--quiet", *local, "--", url, str(tmp)],
            heartbeat,
            config=config,
            allow_protocol=protocol,
            failure=FETCH_FAILED,
        )
        tmp.rename(mirror)
        return True

    def _fetch(self, mirror: Path, source: tuple[str, list[str], str], heartbeat: Callable[[], None] | None) -> None:
        _, config, protocol = source
        run_git(
            ["fetch", "--prune", "--quiet", "origin"],
            heartbeat,
            cwd=mirror,
            config=config,
            allow_protocol=protocol,
            failure=FETCH_FAILED,
        )

    def has_commit(self, mirror: Path, sha: str) -> bool:
        try:
            run_git(["cat-file", "-e", f"{sha}^{{commit}}"], cwd=mirror)
            return True
        except GitError:
            return False

    def ensure_commit(
        self, repo_id: str, clone_url: str, sha: str, heartbeat: Callable[[], None] | None = None
    ) -> Path:
        """The mirror path, holding ``sha`` (cloned or fetched as needed). The URL is checked
        against the policy first, even when the mirror already holds the commit."""
        check_request(clone_url, sha)
        source = self.source(clone_url)
        mirror = self.path(repo_id)
        with self._locked(repo_id):
            self._clone_or_repoint(mirror, source, heartbeat)
            if not self.has_commit(mirror, sha):
                self._fetch(mirror, source, heartbeat)
            if not self.has_commit(mirror, sha):
                raise CommitNotFound(f"commit {sha} is not in the repository")
        return mirror

    def fetch_heads(
        self, repo_id: str, clone_url: str, heartbeat: Callable[[], None] | None = None
    ) -> tuple[Path, dict[str, str]]:
        """Bring the mirror up to date; returns it and its branches' heads (name -> sha)."""
        check_request(clone_url, "0" * 40)
        source = self.source(clone_url)
        mirror = self.path(repo_id)
        with self._locked(repo_id):
            if not self._clone_or_repoint(mirror, source, heartbeat):
                self._fetch(mirror, source, heartbeat)
            out = run_git(["for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/"], cwd=mirror)
        heads = {}
        for line in out.decode(errors="replace").splitlines():
            sha, _, ref = line.partition(" ")
            if SHA.match(sha) and ref.startswith("refs/heads/"):
                heads[ref[len("refs/heads/") :]] = sha
        return mirror, heads

    def resolve_ref(
        self, repo_id: str, clone_url: str, ref: str, heartbeat: Callable[[], None] | None = None
    ) -> tuple[Path, str | None]:
        """Fetch the mirror and resolve ``ref`` (a tag, a branch or a full commit sha) to a commit
        sha; ``None`` when the repository has no such ref. The caller validated ``ref``'s grammar."""
        check_request(clone_url, "0" * 40)
        if ref.startswith("-") or not ref:
            raise InvalidRequest(f"invalid ref {ref!r}")
        source = self.source(clone_url)
        mirror = self.path(repo_id)
        with self._locked(repo_id):
            fresh = self._clone_or_repoint(mirror, source, heartbeat)
            pinned = SHA.match(ref) is not None
            if not fresh and not (pinned and self.has_commit(mirror, ref)):
                # Tags and branches move: read them as the source has them now.
                self._fetch(mirror, source, heartbeat)
            os.utime(mirror)
            candidates = [ref] if pinned else [f"refs/tags/{ref}", f"refs/heads/{ref}"]
            for candidate in candidates:
                try:
                    out = run_git(["rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}"], cwd=mirror)
                except GitError:
                    continue
                sha = out.decode().strip()
                if SHA.match(sha):
                    return mirror, sha
        return mirror, None

    def changed_files(
        self, mirror: Path, head: str, base: str | None, limit: int, merge_base: bool = False
    ) -> list[str] | None:
        """The paths changed by a push or a pull request; ``None`` when there are more than
        ``limit`` or the diff cannot be computed (the caller then treats a path filter as matching).

        A push (``base`` = its ``before``): ``base..head``; when ``base`` is ``None``, all zeros
        (a new branch) or no longer in the mirror (a force push), ``head`` against its first
        parent, and every path of a root commit. A pull request (``merge_base``, ``base`` = the
        base branch's full ref): ``base...head``, the changes since the branches diverged.
        Names are read from git (``-z``, no renames: both sides count), and reading stops past
        ``limit``, so a huge diff costs no more than a small one."""
        check_request("x", head)
        diff = ["diff", "--name-only", "-z", "--no-renames"]
        if merge_base:
            base_sha = self._commit_of(mirror, base) if base and BRANCH_REF.match(base) else None
            if base_sha is None:
                return None
            return _bounded_names([*diff, f"{base_sha}...{head}"], mirror, limit)
        if base is not None and SHA.match(base) and base.strip("0") and self.has_commit(mirror, base):
            return _bounded_names([*diff, base, head], mirror, limit)
        parent = self._commit_of(mirror, f"{head}^1")
        if parent is not None:
            return _bounded_names([*diff, parent, head], mirror, limit)
        root = ["diff-tree", "-r", "--root", "--name-only", "-z", "--no-commit-id", "--no-renames", head]
        return _bounded_names(root, mirror, limit)

    def _commit_of(self, mirror: Path, rev: str) -> str | None:
        try:
            out = run_git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=mirror)
        except GitError:
            return None
        sha = out.decode().strip()
        return sha if SHA.match(sha) else None

    def resolve_branch_or_tag(
        self, repo_id: str, clone_url: str, ref: str, heartbeat: Callable[[], None] | None = None
    ) -> tuple[Path, str, str] | None:
        """Fetch the mirror and resolve a dispatch's ``ref`` (``refs/heads/x``, ``refs/tags/x``, or
        a bare name: the branch, else the tag) to ``(mirror, full ref, commit sha)``; ``None``
        when the repository has no such branch or tag, or ``ref`` is not a plain ref name."""
        check_request(clone_url, "0" * 40)
        if not DISPATCH_REF.match(ref):
            return None
        source = self.source(clone_url)
        mirror = self.path(repo_id)
        with self._locked(repo_id):
            if not self._clone_or_repoint(mirror, source, heartbeat):
                # Branches and tags move: read them as the source has them now.
                self._fetch(mirror, source, heartbeat)
            candidates = (
                [ref] if ref.startswith(("refs/heads/", "refs/tags/")) else [f"refs/heads/{ref}", f"refs/tags/{ref}"]
            )
            for candidate in candidates:
                sha = self._commit_of(mirror, candidate)
                if sha is not None:
                    return mirror, candidate, sha
        return None

    def read_file(self, mirror: Path, sha: str, path: str, max_bytes: int) -> bytes | None:
        """The regular file ``path`` at ``sha`` (``None``: absent, a link, a directory or larger
        than ``max_bytes``); read from git's objects, so no link in the tree is ever followed."""
        check_request("x", sha)
        out = run_git(["ls-tree", "-z", "-l", sha, "--", path], cwd=mirror)
        for entry in out.split(b"\0"):
            meta, _, name = entry.partition(b"\t")
            parts = meta.split()
            if name.decode(errors="replace") != path or len(parts) < 4:
                continue
            if parts[0] not in (b"100644", b"100755") or parts[1] != b"blob":
                return None
            if not parts[3].isdigit() or int(parts[3]) > max_bytes:
                return None
            return run_git(["cat-file", "blob", parts[2].decode()], cwd=mirror)
        return None

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

    def archive_stream(self, mirror: Path, sha: str) -> subprocess.Popen[bytes]:
        """``git archive`` of ``sha`` as a running process whose stdout is the tar stream.

        The worker never unpacks it: the stream goes to the job-side helper, which extracts it
        as the job's uid inside the job's sandbox (``activities.ci.jobroot``), so a tree built to
        escape (duplicate entries from ``git mktree``, links through a chain past PATH_MAX) can
        only write where the job could. The caller waits for the process (``finish_archive``)."""
        check_request("x", sha)
        return subprocess.Popen(
            ["git", "archive", "--format=tar", sha],
            cwd=mirror,
            env=_git_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    @staticmethod
    def finish_archive(proc: subprocess.Popen[bytes], mirror: Path, sha: str) -> None:
        """Wait for an ``archive_stream``; raises ``GitError`` when git failed."""
        err = b""
        try:
            if proc.stdout is not None:
                proc.stdout.close()
            err = proc.stderr.read() if proc.stderr else b""
            code = proc.wait(GIT_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = -9
        finally:
            if proc.stderr is not None:
                proc.stderr.close()
        if code != 0:
            log.warning("git archive %s in %s failed: %s", sha, mirror, err.decode(errors="replace").strip()[-2000:])
            raise GitError("git archive failed")
