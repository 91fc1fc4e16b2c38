"""``actions/cache`` implemented natively: per-tenant, branch-scoped dependency caches in the object store.

Key space: ``ci-cache/<tenant>/<repo>/<scope>/<key>/<created ns>.tar.gz`` where ``scope`` is the
ref's (``heads/<branch>``, ``tags/<tag>``, ``pull/<n>``) and every name part is URL-quoted, so a
key can never climb into another tenant's, repository's or branch's space. A job reads its own
scope, then its repository's default branch's (a pull request's cache cannot poison the default
branch; the default branch's warms everyone); it writes only its own scope. Entries are
write-once; when two jobs save the same key, the newest entry wins.

Restores and saves run in the worker process, over files the job wrote: paths are confined to
the workspace's ``work/``, ``home/`` and ``tmp/``, never followed through symlinks, and archives
are extracted with tarfile's ``data`` filter (nothing outside the workspace, no devices).
``hash_files`` implements ``hashFiles()`` with the same confinement.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import posixpath
import stat
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from leasehold.storage import ObjectStore

log = logging.getLogger(__name__)

CACHE_ROOT = "ci-cache"
ARCHIVE_SUFFIX = ".tar.gz"
# The workspace directories a cache path may name (``~`` is ``home``).
CACHEABLE_DIRS = ("work", "home", "tmp")
MAX_HASHED_FILES = 50_000


class CacheError(RuntimeError):
    """A cache path or archive that cannot be used (the job goes on without the cache)."""


def _q(text: str) -> str:
    # Per-character quoting keeps prefixes: quote(a + b) == quote(a) + quote(b).
    return quote(text, safe="")


def ref_scope(ref: str) -> str:
    """The cache scope of a full ref."""
    for prefix, kind in (("refs/heads/", "heads"), ("refs/tags/", "tags")):
        if ref.startswith(prefix):
            return f"{kind}/{_q(ref[len(prefix) :])}"
    if ref.startswith("refs/pull/"):
        return f"pull/{_q(ref[len('refs/pull/') :].removesuffix('/head'))}"
    return f"other/{_q(ref)}"


def scope_prefix(tenant_id: str, repo_id: str, scope: str) -> str:
    """``ci-cache/<tenant>/<repo>/<scope>/``: everything one branch of one repository cached."""
    return f"{CACHE_ROOT}/{_q(tenant_id)}/{_q(repo_id)}/{scope}/"


def read_scopes(ref: str, default_branch: str | None) -> list[str]:
    """Where a job of ``ref`` looks for caches: its own scope, then the default branch's."""
    own = ref_scope(ref)
    scopes = [own]
    if default_branch:
        default = ref_scope(f"refs/heads/{default_branch}")
        if default != own:
            scopes.append(default)
    return scopes


@dataclass(frozen=True)
class CacheEntry:
    """One stored cache archive."""

    object_key: str
    key: str
    created_ns: int


@dataclass(frozen=True)
class CacheLookup:
    """What a restore found: the entry (if any) and whether it matched the key exactly."""

    entry: CacheEntry | None
    exact: bool


def workspace_paths(path_input: str, mount: str) -> list[str]:
    """The ``path`` input (one path per line) as paths relative to the workspace root,
    each inside ``work/``, ``home/`` or ``tmp/``; raises ``CacheError`` for any other."""
    out: list[str] = []
    for raw in path_input.splitlines():
        text = raw.strip()
        if not text:
            continue
        if text == "~" or text.startswith("~/"):
            rel = "home/" + text[2:]
        elif text.startswith(mount.rstrip("/") + "/"):
            rel = text[len(mount.rstrip("/")) + 1 :]
        elif text.startswith("/tmp/") or text == "/tmp":
            rel = "tmp/" + text[5:]
        elif text.startswith("/"):
            raise CacheError(f"cache path {text!r} is outside the workspace")
        else:
            rel = "work/" + text
        rel = posixpath.normpath(rel)
        if rel.startswith("..") or rel.startswith("/") or rel.split("/", 1)[0] not in CACHEABLE_DIRS:
            raise CacheError(f"cache path {text!r} is outside the workspace")
        if rel in CACHEABLE_DIRS and rel != "work":
            raise CacheError(f"cache path {text!r} names a whole workspace directory")
        out.append(rel)
    if not out:
        raise CacheError("the cache 'path' input names no path")
    return sorted(set(out))


def _no_symlink_parents(root: Path, rel: str) -> bool:
    """Every directory between ``root`` and ``rel`` is a real directory (not a job's symlink)."""
    current = root
    for part in rel.split("/")[:-1]:
        current = current / part
        try:
            if not stat.S_ISDIR(os.lstat(current).st_mode):
                return False
        except FileNotFoundError:
            return False
    return True


def hash_files(work: Path, patterns: list[str]) -> str:
    """``hashFiles()``: SHA-256 over the SHA-256 of each regular file matching the patterns
    (``!pattern`` excludes), relative to the checkout, in path order; ``''`` when none match.
    Files reached through a symlink are skipped: the hash of a host file must not leak."""
    base = os.path.realpath(work)
    included: set[str] = set()
    excluded: set[str] = set()
    for line in (p.strip() for pattern in patterns for p in pattern.splitlines()):
        if not line:
            continue
        target = excluded if line.startswith("!") else included
        pattern = line[1:] if line.startswith("!") else line
        if pattern.startswith("/") or ".." in pattern.split("/"):
            continue
        for match in glob.iglob(pattern, root_dir=base, recursive=True):
            target.add(posixpath.normpath(match))
            if len(included) > MAX_HASHED_FILES:
                raise CacheError(f"hashFiles matched more than {MAX_HASHED_FILES} files")
    outer = hashlib.sha256()
    found = False
    for rel in sorted(included - excluded):
        full = os.path.join(base, rel)
        if os.path.realpath(full) != full:
            continue
        try:
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                continue
            inner = hashlib.sha256()
            while chunk := f.read(1 << 20):
                inner.update(chunk)
        outer.update(inner.digest())
        found = True
    return outer.hexdigest() if found else ""


class CICache:
    """Cache lookups, restores and saves for job attempts (built once per worker)."""

    def __init__(self, store: ObjectStore, max_bytes: int) -> None:
        self._store = store
        self._max_bytes = max_bytes

    def _entries(self, prefix: str) -> list[CacheEntry]:
        entries = []
        for object_key in self._store.list(prefix):
            rest = object_key[len(prefix) :] if object_key.startswith(prefix) else ""
            # ``<quoted key>/<ns>.tar.gz`` relative to the scope prefix.
            scope_rel = object_key.rsplit("/", 2)
            if len(scope_rel) != 3 or not scope_rel[2].endswith(ARCHIVE_SUFFIX) or not rest:
                continue
            stamp = scope_rel[2][: -len(ARCHIVE_SUFFIX)]
            if not stamp.isdigit():
                continue
            entries.append(CacheEntry(object_key, unquote(scope_rel[1]), int(stamp)))
        return entries

    def lookup(self, tenant_id: str, repo_id: str, scopes: list[str], key: str, restore_keys: list[str]) -> CacheLookup:
        """Per scope in order: the exact key, then each restore key as a prefix; newest first."""
        for scope in scopes:
            base = scope_prefix(tenant_id, repo_id, scope)
            exact = self._entries(base + _q(key) + "/")
            if exact:
                return CacheLookup(max(exact, key=lambda e: e.created_ns), exact=True)
            for prefix in restore_keys:
                found = self._entries(base + _q(prefix))
                found = [e for e in found if e.key.startswith(prefix)]
                if found:
                    return CacheLookup(max(found, key=lambda e: e.created_ns), exact=False)
        return CacheLookup(None, exact=False)

    def restore(self, entry: CacheEntry, root: Path, paths: list[str], heartbeat: Callable[[], None]) -> int:
        """Extract ``entry`` into the workspace; only members under ``paths``. Returns bytes."""
        total = 0
        with tempfile.TemporaryFile() as tmp:
            for chunk in self._store.open_stream(entry.object_key):
                tmp.write(chunk)
                heartbeat()
            tmp.seek(0)
            try:
                with tarfile.open(fileobj=tmp, mode="r:gz") as tar:
                    for member in tar:
                        name = posixpath.normpath(member.name)
                        if not any(name == p or name.startswith(p + "/") for p in paths):
                            continue
                        if not _no_symlink_parents(root, name):
                            raise CacheError(f"cache member {name!r} would be written through a symlink")
                        tar.extract(member, root, filter="data")
                        total += member.size
                        heartbeat()
            except (tarfile.TarError, OSError) as exc:
                raise CacheError(f"cache archive could not be restored: {exc}") from exc
        return total

    def save(
        self,
        tenant_id: str,
        repo_id: str,
        scope: str,
        key: str,
        root: Path,
        paths: list[str],
        heartbeat: Callable[[], None],
    ) -> int | None:
        """Archive ``paths`` (those that exist) into the scope under ``key``; returns the
        archive's size, or ``None`` when there was nothing to save."""
        size = 0

        def limit(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
            nonlocal size
            size += info.size
            if size > self._max_bytes:
                raise CacheError(f"cache is larger than {self._max_bytes} bytes; not saved")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            heartbeat()
            return info

        present = [p for p in paths if _no_symlink_parents(root, p) and os.path.lexists(root / p)]
        if not present:
            return None
        with tempfile.NamedTemporaryFile(suffix=ARCHIVE_SUFFIX) as tmp:
            try:
                with tarfile.open(fileobj=tmp, mode="w:gz") as tar:
                    for rel in present:
                        # lstat semantics (dereference=False): a symlink is stored as a link.
                        tar.add(root / rel, arcname=rel, recursive=True, filter=limit)
            except OSError as exc:
                raise CacheError(f"cache could not be archived: {exc}") from exc
            tmp.flush()
            object_key = f"{scope_prefix(tenant_id, repo_id, scope)}{_q(key)}/{time.time_ns():020d}{ARCHIVE_SUFFIX}"
            self._store.put_file(object_key, Path(tmp.name), "application/gzip")
            return os.path.getsize(tmp.name)
