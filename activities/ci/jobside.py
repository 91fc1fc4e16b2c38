"""The job-side helper: every operation on a job's own files, run as the job's uid inside its sandbox.

This file is not imported by the worker. ``activities.ci.jobroot`` copies it into the job's
read-only ``runner/`` directory and runs it with the sandbox's ``/usr/bin/python3 -I -S`` in
the same sandbox as the job's steps (its uid, its mount namespace, its limits, no network).
Whatever the job planted in its tree (symlink chains past PATH_MAX, FIFOs, duplicate tar
entries, unreadable directories) can therefore only reach what the job could reach anyway.

Protocol: ``python3 jobside.py OP ARGS...``; bytes in on stdin (``extract``), bytes out on fd 3
(``archive``); exactly one JSON object on the last line of stdout: ``{"ok": true, ...}`` or
``{"ok": false, "error": "..."}``. The worker treats all of it as hostile data: it bounds the
sizes and the time, and never opens a path this helper names.

Standard library only, and only what Python 3.10 has (the sandbox's own ``/usr/bin/python3``, not the worker's): no
tarfile extraction filters (the sandbox is the boundary; the checks here are hygiene).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import posixpath
import stat
import sys
import tarfile

MAX_HASHED_FILES = 50000
DATA_FD = 3


class HelperError(Exception):
    pass


def _say(obj):
    sys.stdout.write("\n" + json.dumps(obj) + "\n")
    sys.stdout.flush()


def _member_name(name):
    """The member's path relative to the destination, or None for one that would leave it."""
    name = posixpath.normpath(name.lstrip("/"))
    if name in ("", ".") or name == ".." or name.startswith("../"):
        return None
    return name


def _replace_entry(target, is_dir):
    """Make way for a member: a later entry of one name replaces the earlier (GNU tar's way),
    never writing through what is there."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        if is_dir:
            return
        raise HelperError("a directory is in the way")
    os.unlink(target)


def extract(args):
    """``extract DEST [--only PREFIX]...``: a tar stream (any compression) from stdin into DEST."""
    dest = args[0]
    only = [args[i + 1] for i in range(1, len(args) - 1) if args[i] == "--only"]
    total = files = skipped = 0
    stream = os.fdopen(0, "rb", buffering=1 << 16)
    with tarfile.open(fileobj=stream, mode="r|*") as tar:
        for member in tar:
            name = _member_name(member.name)
            if name is None or not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
                skipped += 1
                continue
            if only and not any(name == p or name.startswith(p + "/") for p in only):
                continue
            target = os.path.join(dest, name)
            try:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                _replace_entry(target, member.isdir())
                if member.isdir():
                    os.makedirs(target, exist_ok=True)
                    os.chmod(target, 0o700 | (member.mode & 0o755))
                elif member.issym():
                    os.symlink(member.linkname, target)
                elif member.islnk():
                    link = _member_name(member.linkname)
                    if link is None:
                        skipped += 1
                        continue
                    os.link(os.path.join(dest, link), target, follow_symlinks=False)
                else:
                    source = tar.extractfile(member)
                    if source is None:
                        skipped += 1
                        continue
                    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                    with os.fdopen(fd, "wb") as out:
                        while True:
                            chunk = source.read(1 << 20)
                            if not chunk:
                                break
                            out.write(chunk)
                        os.fchmod(out.fileno(), 0o600 | (member.mode & 0o755))
                    total += member.size
                    files += 1
            except (OSError, HelperError):
                skipped += 1
    return {"bytes": total, "files": files, "skipped": skipped}


def archive(args):
    """``archive MAX_BYTES PATH...``: the paths that exist (relative to the cwd, links kept as
    links) as tar.gz on fd 3; refuses past MAX_BYTES of content."""
    limit = int(args[0])
    present = [p for p in args[1:] if os.path.lexists(p)]
    size = 0

    def account(info):
        nonlocal size
        size += info.size
        if size > limit:
            raise HelperError(f"the cache is larger than {limit} bytes")
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    if not present:
        return {"bytes": 0, "paths": []}
    out = os.fdopen(DATA_FD, "wb", buffering=1 << 16)
    with tarfile.open(fileobj=out, mode="w|gz") as tar:
        for rel in present:
            tar.add(rel, arcname=rel, recursive=True, filter=account)
    out.close()
    return {"bytes": size, "paths": present}


def hash_files(args):
    """``hash PATTERN...``: hashFiles() over the checkout (the cwd): SHA-256 over the SHA-256 of
    each regular file matching (``!`` excludes), in path order; '' when none match. Files
    reached through a symlink are skipped, as are FIFOs and devices (never opened)."""
    base = os.path.realpath(".")
    included: set[str] = set()
    excluded: set[str] = set()
    for line in (p.strip() for pattern in args for p in pattern.splitlines()):
        if not line:
            continue
        target = excluded if line.startswith("!") else included
        pattern = line[1:] if line.startswith("!") else line
        if pattern.startswith("/") or ".." in pattern.split("/"):
            continue
        for match in glob.iglob(pattern, root_dir=base, recursive=True):
            target.add(posixpath.normpath(match))
            if len(included) > MAX_HASHED_FILES:
                raise HelperError(f"hashFiles matched more than {MAX_HASHED_FILES} files")
    outer = hashlib.sha256()
    found = False
    for rel in sorted(included - excluded):
        full = os.path.join(base, rel)
        if os.path.realpath(full) != full:
            continue
        try:
            st = os.lstat(full)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        try:
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                continue
            inner = hashlib.sha256()
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                inner.update(chunk)
        outer.update(inner.digest())
        found = True
    return {"hash": outer.hexdigest() if found else ""}


def _walk(top, need, on_entry):
    """Every entry below the directory ``top``, children before their directory, by descriptor
    (names stay short however deep the tree, and no link is followed). A directory the job made
    unreadable is opened up to ``need`` for the walk (it is the job's own) and put back."""
    try:
        st = os.lstat(top)
        if not stat.S_ISDIR(st.st_mode):
            return
        if (st.st_mode & need) != need:
            os.chmod(top, stat.S_IMODE(st.st_mode) | need)
        top_fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    stack: list[tuple[int, list[os.DirEntry[str]], tuple[int, str, os.stat_result, int | None] | None]] = []
    with os.scandir(top_fd) as it:
        stack.append((top_fd, list(it), None))
    while stack:
        fd, entries, back = stack[-1]
        if entries:
            entry = entries.pop()
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode):
                on_entry(fd, entry.name, st)
                continue
            restore = None
            try:
                if (st.st_mode & need) != need:
                    os.chmod(entry.name, stat.S_IMODE(st.st_mode) | need, dir_fd=fd)
                    restore = stat.S_IMODE(st.st_mode)
                sub = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:
                on_entry(fd, entry.name, st)
                continue
            try:
                with os.scandir(sub) as it:
                    children = list(it)
            except OSError:
                children = []
            stack.append((sub, children, (fd, entry.name, st, restore)))
            continue
        stack.pop()
        os.close(fd)
        if back is not None:
            parent, name, st, restore = back
            if restore is not None:
                try:
                    os.chmod(name, restore, dir_fd=parent)
                except OSError:
                    pass
            on_entry(parent, name, st)


def disk_usage(args):
    """``du DIR...``: bytes of disk the job's files below the directories take."""
    total = [0]

    def add(_dir_fd, _name, st):
        total[0] += st.st_blocks * 512

    for path in args:
        _walk(path, 0o500, add)
    return {"bytes": total[0]}


def clean(args):
    """``clean DIR...``: remove everything below each directory (the directories stay)."""
    left = [0]

    def remove(dir_fd, name, st):
        try:
            if stat.S_ISDIR(st.st_mode):
                os.rmdir(name, dir_fd=dir_fd)
            else:
                os.unlink(name, dir_fd=dir_fd)
        except OSError:
            left[0] += 1

    for path in args:
        _walk(path, 0o700, remove)
    return {"left": left[0]}


OPS = {"extract": extract, "archive": archive, "hash": hash_files, "du": disk_usage, "clean": clean}


def main(argv):
    if len(argv) < 2 or argv[1] not in OPS:
        _say({"ok": False, "error": "unknown operation"})
        return 2
    try:
        result = OPS[argv[1]](argv[2:])
    except (OSError, HelperError, tarfile.TarError, EOFError, ValueError) as exc:
        # The message names paths as the job sees them (never a host path).
        _say({"ok": False, "error": str(exc)[:500]})
        return 1
    result["ok"] = True
    _say(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
