"""What a ``uses:`` names: a built-in action, a local ``./path``, or ``owner/repo[/path]@ref``.

The text is the tenant's; the names it yields become a directory below the operator's mirror
directory, a URL made from the operator's template, and a git ref. So the grammar is strict:
names are made of the characters GitHub allows, no part is ``.`` or ``..``, a ref cannot start
an option or leave ``refs/``. Anything else (``docker://``, a URL, an absolute path) is refused
with a reason. Pure: the parser and the listing both use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from workflows.ci.types.spec import BUILTIN_ACTIONS

# GitHub's own limits: owners are 1-39 letters, digits and '-'; repositories 1-100 of
# letters, digits, '-', '_', '.'.
_OWNER = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
_REF = re.compile(r"^[A-Za-z0-9_.+/-]{1,255}$")
MAX_LOCAL_PATH = 512
DOCKER_REFUSED = (
    "Docker actions are not supported by this deployment (use a composite or JavaScript action, or 'run:' steps)"
)


class ActionRefError(ValueError):
    """A ``uses:`` that names nothing leasehold can run; the message says why."""


@dataclass(frozen=True)
class ActionRef:
    """A parsed ``uses:``. ``local``: ``path`` is relative to the workspace; else the action is
    ``owner/repo`` at ``ref``, in the directory ``path`` ("" for the repository's root)."""

    local: bool
    path: str
    owner: str = ""
    repo: str = ""
    ref: str = ""

    @property
    def repository(self) -> str:
        return f"{self.owner}/{self.repo}"


def is_builtin(uses: str) -> bool:
    """``actions/checkout@...`` or ``actions/cache@...``: the worker implements these itself."""
    name, at, version = uses.partition("@")
    return bool(at and version) and name.lower() in BUILTIN_ACTIONS


def safe_parts(path: str) -> list[str]:
    parts = [p for p in path.split("/") if p]
    for part in parts:
        if part in (".", "..") or not _NAME.match(part):
            raise ActionRefError(f"path part {part!r} is not allowed (letters, digits, '-', '_', '.'; no '..')")
    return parts


def parse_uses(uses: str) -> ActionRef:
    """Parse a non-built-in ``uses:``; raises ``ActionRefError``."""
    if "${{" in uses:
        raise ActionRefError("'uses' must be literal: expressions are not allowed here (as on GitHub)")
    if uses.lower().startswith("docker://"):
        raise ActionRefError(DOCKER_REFUSED)
    if uses.startswith("./") or uses == ".":
        if len(uses) > MAX_LOCAL_PATH:
            raise ActionRefError(f"a local action path is at most {MAX_LOCAL_PATH} characters")
        if "@" in uses:
            raise ActionRefError("a local action ('./path') takes no '@ref': it is read from the pushed commit")
        return ActionRef(local=True, path="/".join(safe_parts(uses[2:])))
    name, at, ref = uses.partition("@")
    if not at or not ref:
        raise ActionRefError("an action is './path' (in this repository) or 'owner/repo[/path]@ref'")
    parts = name.split("/")
    if len(parts) < 2 or not _OWNER.match(parts[0]) or not _NAME.match(parts[1]) or parts[1] in (".", ".."):
        raise ActionRefError("an action is './path' (in this repository) or 'owner/repo[/path]@ref'")
    path = "/".join(safe_parts("/".join(parts[2:]))) if len(parts) > 2 else ""
    if not _REF.match(ref) or ref.startswith(("-", "/", ".")) or ".." in ref or "//" in ref or ref.endswith("/"):
        raise ActionRefError(f"{ref!r} is not a valid git ref, tag or commit sha")
    return ActionRef(local=False, path=path, owner=parts[0], repo=parts[1], ref=ref)
