"""Replay this build's recorded histories of the dispatch paths (batched grants, a chain's slot
hand-off, the run's own slot queue): a change to the run or the semaphore that would break such
executions fails here unless it comes with a new build id (``docs/versioning.md``). Record with
``python -m tests.ci_dispatch.record_histories`` (it never overwrites a file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ci_core.test_ci_replay import WORKFLOWS, load
from tests.history_builds import check_recorded_by_this_build, replay_failure, replayed, this_build
from workflows.ci.semaphore import SIGNAL_ACQUIRE_MANY, SIGNAL_GRANTED_MANY, SIGNAL_RELEASE, SIGNAL_TRANSFER
from workflows.ci.types.job import SIGNAL_ATTEMPT_RUNNING
from workflows.version import BUILD_ID

HISTORIES = Path(__file__).parent / "histories"
RECORDED = this_build(HISTORIES)
REPLAYED = replayed(HISTORIES)


def signals(path: Path) -> list[str]:
    return [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in load(path).events
        if e.HasField("workflow_execution_signaled_event_attributes")
    ]


def sent(path: Path) -> list[str]:
    return [
        e.signal_external_workflow_execution_initiated_event_attributes.signal_name
        for e in load(path).events
        if e.HasField("signal_external_workflow_execution_initiated_event_attributes")
    ]


def test_the_histories_are_this_builds() -> None:
    check_recorded_by_this_build(HISTORIES, load)


def test_the_recordings_exercise_the_dispatch_paths() -> None:
    here = HISTORIES / BUILD_ID
    assert {p.stem for p in RECORDED} == {
        "run-capped_chain",
        "semaphore-capped_chain",
        "run-slot_queue",
        "semaphore-slot_queue",
    }
    # A capped chain: one acquire for the first pass's two jobs and one grant signal for both;
    # attempts granted with their activities (no Update; the long job reported its start), and
    # the chain's slot handed on with no signal: the run sends its one acquire and two releases.
    # ``solo`` runs past the attempt's notice, so it reports its start.
    chain = here / "run-capped_chain.json"
    assert signals(chain).count(SIGNAL_GRANTED_MANY) == 1, signals(chain)
    assert not [e for e in load(chain).events if e.HasField("workflow_execution_update_accepted_event_attributes")]
    # (How many others outlast the notice depends on the machine's load when recorded.)
    assert signals(chain).count(SIGNAL_ATTEMPT_RUNNING) >= 1, signals(chain)
    assert sorted(sent(chain)) == [SIGNAL_ACQUIRE_MANY, SIGNAL_RELEASE, SIGNAL_RELEASE], sent(chain)
    assert SIGNAL_TRANSFER not in signals(here / "semaphore-capped_chain.json")
    # Three jobs under a cap of one, with the run's own slot queue: one request, one grant, the
    # slot taken in turn by the two that waited in the run, one release; no transfer.
    queue = here / "run-slot_queue.json"
    assert sent(queue) == [SIGNAL_ACQUIRE_MANY, SIGNAL_RELEASE], sent(queue)
    assert [s for s in signals(queue) if s != SIGNAL_ATTEMPT_RUNNING] == [SIGNAL_GRANTED_MANY], signals(queue)
    assert SIGNAL_TRANSFER not in signals(here / "semaphore-slot_queue.json")
    # No version branches left: nothing records a patch marker.
    assert not [p.name for p in RECORDED for e in load(p).events if e.HasField("marker_recorded_event_attributes")]


@pytest.mark.parametrize("path", REPLAYED, ids=[f"{p.parent.name}/{p.stem}" for p in REPLAYED])
async def test_recorded_dispatch_history_replays(path: Path) -> None:
    failure = await replay_failure(WORKFLOWS, load(path))
    assert failure is None, f"{path.name}: {failure!r}"
