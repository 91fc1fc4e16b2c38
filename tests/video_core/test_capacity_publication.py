"""The capacity leader's publication: what followers plan from must survive the round trip, in
the positional format and in the object format an older leader wrote."""

from __future__ import annotations

import json
from dataclasses import asdict

from video_policy.eta import (
    ArrivalLog,
    JobShape,
    ModelSnapshot,
    QueuedJob,
    RunningJob,
    snapshot_from_json,
    snapshot_to_json,
)


def _snapshot() -> ModelSnapshot:
    shape = JobShape(steps=20, frames=8, width=180, height=320)
    return ModelSnapshot(
        model="procedural-v1",
        taken_at=1_700_000_000.25,
        queued=[
            QueuedJob("video_a", "t1", "u1", "paid", 1_699_999_990.5, shape, "paid/t1/u1", 4.0),
            QueuedJob("video_b", "t2", "u2", "free", 1_699_999_991.5, JobShape(30, 16, 256, 256), "free/t2/u2", 1.0),
        ],
        running=[RunningJob("video_c", "t1", "u3", "paid", shape, 7, "gpu-1", False, 2)],
        workers_serving=3,
        workers_polling=1,
        backlog=2,
        oldest_queued_age_seconds=9.5,
        completions_per_minute=4.5,
        mean_job_seconds=12.0,
        measured=True,
    )


def test_publication_round_trips_through_json() -> None:
    snapshot = _snapshot()
    published = json.loads(json.dumps(snapshot_to_json(snapshot)))
    assert snapshot_from_json(published) == snapshot


def test_an_older_leaders_object_format_still_loads() -> None:
    snapshot = _snapshot()
    assert snapshot_from_json(json.loads(json.dumps(asdict(snapshot)))) == snapshot


def test_arrival_log_loads_both_shape_formats() -> None:
    log = ArrivalLog(window_seconds=600)
    shape = JobShape(steps=20, frames=8, width=180, height=320)
    log.observe("video_a", 100.0, "paid/t1/u1", 4.0, "paid", shape, 110.0)
    current = json.loads(json.dumps(log.to_json()))
    older = {**current, "arrivals": [[*row[:5], asdict(shape)] for row in current["arrivals"]]}
    for data in (current, older):
        loaded = ArrivalLog(window_seconds=600)
        loaded.load_json(data)
        assert loaded.to_json() == current
