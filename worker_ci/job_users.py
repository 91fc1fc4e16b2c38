"""The pool of host uids CI jobs run as (``worker_ci.sandbox`` and the other backends lease one
per job attempt)."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable
from pathlib import Path

from activities.ci.jobroot import make_layout, refresh_runner
from activities.ci.sandbox import JobOwner, SandboxError


class JobUserPool:
    """Host uids for jobs, one per running attempt, leased with a lock file each (released by
    the kernel if the worker dies), so several workers on one host never share a uid."""

    def __init__(self, lock_dir: Path, base: int, count: int) -> None:
        if base < 1000 or count < 1 or base + count > 2**31 - 2:
            raise SandboxError(f"bad CI job uid range {base}+{count}")
        lock_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._dir = lock_dir
        self._base = base
        self._count = count
        self._held: dict[int, int] = {}
        self._roots: dict[Path, JobOwner] = {}
        self._lock = threading.Lock()
        self._next = 0

    def acquire(self) -> int:
        with self._lock:
            for i in range(self._count):
                uid = self._base + (self._next + i) % self._count
                if uid in self._held:
                    continue
                fd = os.open(self._dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    os.close(fd)
                    continue
                self._held[uid] = fd
                self._next = (self._next + i + 1) % self._count
                return uid
        raise SandboxError("no free CI job uid: raise LEASEHOLD_CI_SANDBOX_UID_COUNT")

    def release(self, uid: int) -> None:
        with self._lock:
            fd = self._held.pop(uid, None)
        if fd is not None:
            os.close(fd)

    def lease_root(self, root: Path, extra: Callable[[Path, int], None] | None = None) -> JobOwner:
        """Lease a uid for one job root and make the root's layout for it (``extra`` adds a
        backend's own files)."""
        uid = self.acquire()
        owner = JobOwner(uid, uid)
        try:
            make_layout(root, owner)
            if extra is not None:
                extra(root, uid)
        except OSError:
            self.release(uid)
            raise
        with self._lock:
            self._roots[root] = owner
        return owner

    def release_root(self, root: Path) -> None:
        with self._lock:
            owner = self._roots.pop(root, None)
        if owner is not None and owner.uid is not None:
            self.release(owner.uid)

    def acquire_uid(self, uid: int) -> bool:
        """Lease this very uid if no attempt holds it (a leftover root's owner, for cleaning it
        up as that user); ``False`` when it is out of range or held."""
        if not self._base <= uid < self._base + self._count:
            return False
        with self._lock:
            if uid in self._held:
                return False
            fd = os.open(self._dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                return False
            self._held[uid] = fd
            return True

    def adopt_root(self, root: Path, owner: JobOwner, extra: Callable[[Path, int], None] | None = None) -> bool:
        """Take over a leftover job root whose owner no attempt holds (see ``acquire_uid``),
        with root's own runner files made anew."""
        if owner.uid is None or not self.acquire_uid(owner.uid):
            return False
        try:
            refresh_runner(root, extra is not None)
            if extra is not None:
                extra(root, owner.uid)
        except OSError:
            self.release(owner.uid)
            return False
        with self._lock:
            self._roots[root] = owner
        return True

    def owner_of(self, root: Path) -> JobOwner:
        with self._lock:
            owner = self._roots.get(root)
        if owner is None or owner.uid is None:
            raise SandboxError(f"no job user for {root}: prepare() was not called")
        return owner
