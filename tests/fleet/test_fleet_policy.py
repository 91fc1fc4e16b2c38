"""The fleet controller's sizing rule (``workflows.fleet.sizing``) on made-up demand."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from workflows.fleet.sizing import decide, within_ceiling
from workflows.fleet.types import FleetObservation, FleetPool, FleetSpec, GroupDemand

RESERVED = "procedural-v1@reserved"
PREEMPTIBLE = "procedural-v1@preemptible"


def spec(**fields: object) -> FleetSpec:
    pools = [
        FleetPool(model="procedural-v1", capacity_type="reserved", min_workers=1, max_workers=2, gpu_hour_cost=1.0),
        FleetPool(model="procedural-v1", capacity_type="preemptible", max_workers=4, gpu_hour_cost=0.4),
    ]
    return FleetSpec.model_validate(
        {"pools": pools, "target_wait_seconds": 60.0, "scale_down_after_ticks": 3, **fields}
    )


def seen(**demand: object) -> FleetObservation:
    return FleetObservation(taken_at=0.0, demand={"procedural-v1": GroupDemand(group="procedural-v1", **demand)})  # type: ignore[arg-type]


def sizes(fleet: FleetSpec, observation: FleetObservation, current: dict[str, int]) -> dict[str, int]:
    decisions, _ = decide(fleet, observation, current, {})
    return {d.key: d.desired for d in decisions}


def test_free_burst_grows_preemptible_beyond_the_reserved_spare() -> None:
    # 6 free jobs of 60 s waiting, target 60 s: 6 workers' worth, capped at 4; reserved has 1 to spare.
    burst = seen(queued={"free": 6}, work_seconds={"free": 360.0}, mean_job_seconds=60.0)
    assert sizes(spec(), burst, {RESERVED: 1}) == {RESERVED: 1, PREEMPTIBLE: 4}
    small = seen(queued={"free": 2}, work_seconds={"free": 120.0}, mean_job_seconds=60.0)
    assert sizes(spec(), small, {RESERVED: 1}) == {RESERVED: 1, PREEMPTIBLE: 1}


def test_paid_work_beyond_reserved_spills_to_preemptible() -> None:
    paid = seen(queued={"paid": 2}, running={"paid": 3}, work_seconds={"paid": 300.0}, mean_job_seconds=60.0)
    assert sizes(spec(), paid, {RESERVED: 2, PREEMPTIBLE: 0}) == {RESERVED: 2, PREEMPTIBLE: 3}


def test_shrink_is_held_then_goes_to_the_most_wanted_meanwhile() -> None:
    fleet = spec()
    current = {RESERVED: 1, PREEMPTIBLE: 3}
    streaks: dict[str, list[int]] = {}
    wanted = [
        seen(running={"free": 2}, work_seconds={"free": 60.0}),  # 2 running: 1 on reserved's spare
        seen(),
        seen(),
    ]
    desired = []
    for observation in wanted:
        decisions, streaks = decide(fleet, observation, current, streaks)
        desired.append({d.key: d.desired for d in decisions}[PREEMPTIBLE])
    assert desired == [3, 3, 1]
    # Growing again breaks the streak at once.
    decisions, streaks = decide(fleet, seen(queued={"free": 9}, work_seconds={"free": 900.0}), current, streaks)
    assert {d.key: d.desired for d in decisions}[PREEMPTIBLE] == 4 and streaks == {}


def test_no_traffic_drains_a_version_to_its_minimum() -> None:
    fleet = spec()
    current = {RESERVED: 2, PREEMPTIBLE: 2}
    streaks: dict[str, list[int]] = {}
    for _ in range(3):
        decisions, streaks = decide(fleet, seen(), current, streaks)
    assert {d.key: d.desired for d in decisions} == {RESERVED: 1, PREEMPTIBLE: 0}
    assert all("shrink after 3 ticks" in d.reason for d in decisions)


def test_cost_ceiling_cuts_free_capacity_first_and_keeps_minimums() -> None:
    fleet = spec(cost_ceiling_per_hour=2.0)
    sized, cut = within_ceiling(fleet, {RESERVED: 2, PREEMPTIBLE: 4})
    # 2 x 1.0 + 4 x 0.4 = 3.6 > 2.0: preemptible goes to 0 before reserved loses one.
    assert sized == {RESERVED: 2, PREEMPTIBLE: 0} and cut == {PREEMPTIBLE}
    sized, _ = within_ceiling(spec(cost_ceiling_per_hour=0.5), {RESERVED: 2, PREEMPTIBLE: 4})
    assert sized == {RESERVED: 1, PREEMPTIBLE: 0}  # the minimum wins over the ceiling


def test_spec_refuses_bad_bounds_and_duplicate_pools() -> None:
    with pytest.raises(ValidationError, match="min_workers 3 > max_workers 1"):
        FleetPool(model="procedural-v1", capacity_type="reserved", min_workers=3, max_workers=1)
    with pytest.raises(ValidationError, match="listed once"):
        FleetSpec(pools=[FleetPool(model="m", capacity_type="reserved")] * 2)
    with pytest.raises(ValidationError):
        FleetPool(model="../etc", capacity_type="reserved")
