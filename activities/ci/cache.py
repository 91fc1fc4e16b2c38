"""``actions/cache`` implemented natively: per-tenant, branch-scoped dependency caches in the object store.

Key space: ``ci-cache/<tenant>/<repo>/<scope>/<key>/<created ns>.tar.gz`` where ``scope`` is the
ref's (``heads/<branch>``, ``tags/<tag>``, ``pull/<n>``) and every name part is URL-quoted, so a
key can never climb into another tenant's, repository's or branch's space. A job reads its own
scope, then its repository's default branch's (a pull request's cache cannot poison the default
branch; the default branch's warms everyone); it writes only its own scope. Entries are
write-once; when two jobs save the same key, the newest entry wins.

Paths are confined to the workspace's ``work/``, ``home/`` and ``tmp/``. The worker only moves
bytes: it downloads an entry into a temporary file of its own and hands the descriptor to the
job-side helper, which unpacks it as the job's uid inside the job's sandbox; a save is the
helper's tar.gz stream on a pipe, bounded here, stored as it comes. Nothing of the job's tree
is opened by the worker (``activities.ci.jobroot``: the root rule).
"""

from __future__ import annotations

import logging
import posixpath
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from activities.ci.jobroot import JobRoot, JobTreeError
from leasehold.storage import ObjectStore

log = logging.getLogger(__name__)

CACHE_ROOT = "ci-cache"
ARCHIVE_SUFFIX = ".tar.gz"
# The workspace directories a cache path may name (``~`` is ``home``).
CACHEABLE_DIRS = ("work", "home", "tmp")


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

    def restore(self, entry: CacheEntry, tree: JobRoot, paths: list[str], heartbeat: Callable[[], None]) -> int:
        """Unpack ``entry`` into the job's tree, as the job; only members under ``paths``.
        Returns the bytes of the files restored."""
        with tempfile.TemporaryFile() as tmp:
            for chunk in self._store.open_stream(entry.object_key):
                tmp.write(chunk)
                heartbeat()
            tmp.flush()
            tmp.seek(0)
            try:
                result = tree.extract("", tmp.fileno(), only=paths)
            except JobTreeError as exc:
                raise CacheError(f"cache archive could not be restored: {exc}") from exc
        size = result.get("bytes")
        return size if isinstance(size, int) else 0

    def save(
        self,
        tenant_id: str,
        repo_id: str,
        scope: str,
        key: str,
        tree: JobRoot,
        paths: list[str],
        heartbeat: Callable[[], None],
    ) -> int | None:
        """Archive ``paths`` (those that exist) of the job's tree, as the job, into the scope
        under ``key``; returns the archive's size, or ``None`` when there was nothing to save."""
        with tempfile.NamedTemporaryFile(suffix=ARCHIVE_SUFFIX) as tmp:
            written = 0

            def sink(chunk: bytes) -> None:
                nonlocal written
                written += len(chunk)
                if written > self._max_bytes:
                    raise CacheError(f"cache is larger than {self._max_bytes} bytes; not saved")
                tmp.write(chunk)

            try:
                present = tree.archive(paths, sink, self._max_bytes)
            except JobTreeError as exc:
                raise CacheError(f"cache could not be archived: {exc}") from exc
            if not present:
                return None
            tmp.flush()
            heartbeat()
            object_key = f"{scope_prefix(tenant_id, repo_id, scope)}{_q(key)}/{time.time_ns():020d}{ARCHIVE_SUFFIX}"
            self._store.put_file(object_key, Path(tmp.name), "application/gzip")
            return written
