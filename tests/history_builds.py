"""Recorded histories, kept per build id (``docs/versioning.md``).

Each suite keeps its recordings in ``histories/<build id>/``. Every workflow is pinned to the
build that started it (entity workflows move to a new build only through continue-as-new, which
starts a fresh history), so the code of a build only ever replays histories of that build: the
replay tests replay ``histories/<BUILD_ID>/`` and nothing else. A change that alters the
commands of a recorded history fails them, until the change comes with a new ``BUILD_ID`` and
histories recorded by it.

Directories of earlier builds stay only while that build may still have open executions: their
activity inputs still reach today's activity workers (activity routing is unversioned), so the
payload tests decode them in today's types. Delete one once its build has drained. An earlier
build whose open executions were moved onto this one (a fix behind ``workflow.patched``) is
listed in ``ALSO_REPLAYED`` while they are open: this code must replay its histories too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from workflows.version import BUILD_ID

# Earlier builds whose executions were moved onto this build (docs/versioning.md, "When a patch
# is still the right tool"); empty once they have closed.
ALSO_REPLAYED: tuple[str, ...] = ()


def this_build(histories: Path) -> list[Path]:
    """The recordings of this build."""
    return sorted((histories / BUILD_ID).glob("*.json"))


def replayed(histories: Path) -> list[Path]:
    """The recordings the replay tests hold today's code to: this build's, and those of the
    builds in ``ALSO_REPLAYED``."""
    return this_build(histories) + [p for build in ALSO_REPLAYED for p in sorted((histories / build).glob("*.json"))]


def every_build(histories: Path) -> list[Path]:
    """The recordings of every build kept (this one and those still draining)."""
    return sorted(histories.glob("*/*.json"))


def recorded_by(history: WorkflowHistory) -> set[tuple[str, str]]:
    """(deployment name, build id) of the workers that completed the history's workflow tasks;
    empty for a history recorded by an unversioned worker."""
    found = set()
    for event in history.events:
        if event.HasField("workflow_task_completed_event_attributes"):
            version = event.workflow_task_completed_event_attributes.deployment_version
            if version.build_id:
                found.add((version.deployment_name, version.build_id))
    return found


def check_recorded_by_this_build(histories: Path, load: Callable[[Path], WorkflowHistory]) -> None:
    """There are recordings for ``BUILD_ID``, and this build's versioned workers wrote every one
    of them (not a renamed directory of another build's). ``load(path)`` reads one."""
    recorded = this_build(histories)
    assert recorded, (
        f"no histories recorded for build {BUILD_ID} in {histories}: a new build id needs its own "
        "recordings (see docs/versioning.md)"
    )
    for path in recorded:
        builds = {build for _, build in recorded_by(load(path))}
        assert builds == {BUILD_ID}, f"{path.name}: workflow tasks completed by builds {sorted(builds)}"


async def replay_failure(workflows: Sequence[type[Any]], history: WorkflowHistory) -> BaseException | None:
    """Why ``workflows`` fail to replay ``history`` (None: they replay it), inside the SDK's
    sandbox: the determinism guard production runs without."""
    replayer = Replayer(
        workflows=workflows, data_converter=pydantic_data_converter, workflow_runner=SandboxedWorkflowRunner()
    )
    return (await replayer.replay_workflow(history, raise_on_replay_failure=False)).replay_failure
