"""The job-root reaper (``activities.ci.reaper``): roots are emptied after the attempt returns,
the uid is given back only once its root is gone, a full backlog makes the attempt wait, and a
root that cannot be emptied still gives its uid back (the start-up sweep takes the rest)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, cast

from activities.ci.jobroot import JobRoot
from activities.ci.reaper import RootReaper


class Tree:
    def __init__(self, path: str, gate: threading.Event | None = None, fail: bool = False) -> None:
        self.path, self.gate, self.fail, self.removed_on = Path(path), gate, fail, ""

    def remove(self) -> None:
        if self.gate is not None:
            assert self.gate.wait(10)
        self.removed_on = threading.current_thread().name
        if self.fail:
            raise RuntimeError("helper failed")


class Sandbox:
    def __init__(self) -> None:
        self.released: list[Path] = []

    def release(self, root: Path) -> None:
        self.released.append(root)


def tree(t: Tree) -> JobRoot:
    return cast(Any, t)


def test_a_root_is_emptied_later_and_its_uid_released_after() -> None:
    sandbox, gate = Sandbox(), threading.Event()
    reaper = RootReaper(sandbox, backlog=4)
    slow = Tree("/r/1", gate)
    reaper.dispose(tree(slow))
    # The attempt did not wait: the root is still being emptied and its uid still held.
    assert sandbox.released == [] and not reaper.drain(0.2)
    gate.set()
    assert reaper.drain(10)
    assert sandbox.released == [Path("/r/1")] and slow.removed_on == "ci-root-reaper"


def test_a_full_backlog_makes_the_attempt_empty_its_own_root() -> None:
    sandbox, gate = Sandbox(), threading.Event()
    reaper = RootReaper(sandbox, backlog=1)
    waiting, own = Tree("/r/1", gate), Tree("/r/2")
    reaper.dispose(tree(waiting))
    reaper.dispose(tree(own))
    assert own.removed_on == threading.current_thread().name and sandbox.released == [Path("/r/2")]
    gate.set()
    assert reaper.drain(10) and sandbox.released == [Path("/r/2"), Path("/r/1")]


def test_a_root_that_cannot_be_emptied_still_releases_its_uid() -> None:
    sandbox = Sandbox()
    reaper = RootReaper(sandbox, backlog=2)
    reaper.dispose(tree(Tree("/r/1", fail=True)))
    reaper.dispose(tree(Tree("/r/2")))
    assert reaper.drain(10)
    assert sandbox.released == [Path("/r/1"), Path("/r/2")]
