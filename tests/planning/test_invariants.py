"""Invariants of the simulator: Little's law, conservation of jobs, fair shares, bounded lost
work per preemption, gangs all or nothing."""

from __future__ import annotations

from typing import Any

from leasehold.settings import Settings
from planning.engine import Simulation, simulate
from planning.report import percentile
from planning.scenario import Scenario, parse_scenario
from planning.scenarios import built_in


def scenario(**fields: Any) -> Scenario:
    base: dict[str, Any] = {
        "name": "test",
        "seed": 11,
        "horizon_seconds": 4000.0,
        "warmup_seconds": 500.0,
        "drain_seconds": 3600.0,
        "tiers": [
            {"tier": "paid", "per_second": 0.25, "users": 200},
            {"tier": "free", "per_second": 0.5, "users": 400},
        ],
        "shapes": [{"name": "j", "share": 1.0, "gpu_seconds": 20.0, "cv": 0.5}],
        "pools": [{"gpu_class": "g", "purchase": "reserved", "gpus": 20, "usd_per_gpu_hour": 2.0}],
        "checkpoint_write_seconds": 0.0,
        "resume_seconds": 0.0,
        "refresh_seconds": 10.0,
    }
    base.update(fields)
    return parse_scenario(base, "test")


def test_littles_law_at_steady_state(plan_settings: Settings) -> None:
    # 0.75 jobs/s x 20 s = 15 GPUs busy of 20 (utilisation 75 %): some queueing, no refusals.
    result = simulate(scenario(), plan_settings)
    offered = result.accepted_per_second * result.mean_work_per_job
    assert abs(result.mean_busy - offered) / offered < 0.05, (result.mean_busy, offered)
    # The queue obeys it too: mean number waiting = arrival rate x mean wait.
    waits = [w for f in result.tiers.values() for w in f.waits]
    mean_wait = sum(waits) / len(waits)
    assert mean_wait > 0.2  # there is a queue to check the law on
    littles = result.accepted_per_second * mean_wait
    assert abs(result.mean_waiting - littles) <= 0.1 * littles + 0.05, (result.mean_waiting, littles)


def test_jobs_are_conserved_through_preemptions_and_refusals(plan_settings: Settings) -> None:
    result = simulate(built_in("small"), plan_settings)
    assert result.preemptions > 0
    assert result.accepted_total == result.completed_total + result.failed_total + result.open_at_end
    assert result.open_at_end == 0  # the drain ends every job
    for figures in result.tiers.values():
        assert figures.submitted == figures.accepted + figures.refused_429 + figures.refused_503
        assert figures.accepted == figures.completed + figures.failed + figures.open
        assert len(figures.waits) == figures.accepted
    # The small scenario's bursts hit the per-user cap: refusals happen and are counted.
    assert sum(f.refused_429 for f in result.tiers.values()) > 0


def test_fair_shares_follow_the_tier_weights_under_contention(plan_settings: Settings) -> None:
    # Demand of 4 jobs/s x 20 s = 80 GPUs on 10: every user keeps a backlog (up to the cap) all
    # along, and few users cycle their keys many times within the window (steady state).
    contended = scenario(
        horizon_seconds=1800.0,
        warmup_seconds=300.0,
        drain_seconds=0.0,
        tiers=[{"tier": "paid", "per_second": 2.0, "users": 8}, {"tier": "free", "per_second": 2.0, "users": 8}],
        shapes=[{"name": "j", "share": 1.0, "gpu_seconds": 20.0}],
        pools=[{"gpu_class": "g", "purchase": "reserved", "gpus": 10, "usd_per_gpu_hour": 2.0}],
    )
    result = simulate(contended, plan_settings)
    paid = result.tiers["paid"].dispatched
    free = result.tiers["free"].dispatched
    assert paid + free > 500
    expected = plan_settings.video_paid_weight / (plan_settings.video_paid_weight + plan_settings.video_free_weight)
    assert abs(paid / (paid + free) - expected) < 0.05, (paid, free)
    # Contention shows where the policies say it does: caps refuse (429) in both tiers.
    assert result.tiers["paid"].refused_429 > 0 and result.tiers["free"].refused_429 > 0


def test_equal_weights_give_equal_shares(tmp_path: Any) -> None:
    settings = Settings(data_dir=tmp_path / "data", video_paid_weight=1.0, video_free_weight=1.0)
    contended = scenario(
        horizon_seconds=1800.0,
        warmup_seconds=300.0,
        drain_seconds=0.0,
        tiers=[{"tier": "paid", "per_second": 2.0, "users": 8}, {"tier": "free", "per_second": 2.0, "users": 8}],
        shapes=[{"name": "j", "share": 1.0, "gpu_seconds": 20.0}],
        pools=[{"gpu_class": "g", "purchase": "reserved", "gpus": 10, "usd_per_gpu_hour": 2.0}],
    )
    result = simulate(contended, settings)
    paid, free = result.tiers["paid"].dispatched, result.tiers["free"].dispatched
    assert abs(paid / (paid + free) - 0.5) < 0.05, (paid, free)


def test_a_preemption_loses_at_most_one_checkpoint_interval(plan_settings: Settings) -> None:
    killed = scenario(
        horizon_seconds=2000.0,
        shapes=[{"name": "long", "share": 1.0, "gpu_seconds": 120.0, "cv": 0.3}],
        tiers=[{"tier": "paid", "per_second": 0.1, "users": 100}],
        pools=[
            {
                "gpu_class": "g",
                "purchase": "preemptible",
                "gpus": 20,
                "usd_per_gpu_hour": 1.0,
                "preemptions_per_gpu_hour": 20.0,
                "warned_share": 0.0,
                "replace_seconds": 10.0,
            }
        ],
        checkpoint_write_seconds=1.0,
        resume_seconds=1.0,
    )
    for interval in (5.0, 15.0):
        result = simulate(killed, plan_settings, checkpoint_interval=interval, record_attempts=True)
        kills = [a for a in result.attempts if a.outcome == "killed"]
        assert len(kills) > 20
        assert max(a.lost_work for a in kills) <= interval + 1e-9
        # Not vacuous: kills do lose work, about half an interval on average.
        mean = sum(a.lost_work for a in kills) / len(kills)
        assert 0.2 * interval < mean < 0.8 * interval, mean
    # With a warning the notice's checkpoint saves everything.
    warned = killed.model_copy(update={"pools": [killed.pools[0].model_copy(update={"warned_share": 1.0})]})
    result = simulate(warned, plan_settings, checkpoint_interval=15.0, record_attempts=True)
    notices = [a for a in result.attempts if a.outcome == "preempted"]
    assert notices and all(a.lost_work == 0.0 for a in notices)


def test_gangs_run_all_or_nothing(plan_settings: Settings) -> None:
    gang = built_in("gang").model_copy(update={"horizon_seconds": 2400.0, "warmup_seconds": 600.0})
    result = simulate(gang, plan_settings, record_attempts=True)
    gangs = [a for a in result.attempts if a.gpus_needed > 1]
    assert gangs and any(a.outcome != "completed" for a in gangs)
    assert all(a.gpus_held == a.gpus_needed for a in result.attempts)
    # Never more GPUs held at once than the fleet has.
    fleet = sum(p.gpus for p in gang.pools)
    edges = sorted(
        [(a.started, a.gpus_held) for a in result.attempts] + [(a.ended, -a.gpus_held) for a in result.attempts]
    )
    held = peak = 0
    for _t, delta in sorted(edges, key=lambda e: (e[0], e[1])):
        held += delta
        peak = max(peak, held)
    assert peak <= fleet
    assert result.accepted_total == result.completed_total + result.failed_total + result.open_at_end


def test_backfilling_shortens_waits_behind_gangs(plan_settings: Settings) -> None:
    gang = built_in("gang").model_copy(update={"horizon_seconds": 2400.0, "warmup_seconds": 600.0})
    with_backfill = simulate(gang, plan_settings)
    without = simulate(gang.model_copy(update={"backfill": False}), plan_settings)
    assert with_backfill.backfilled > 0 and without.backfilled == 0
    waits_with = [w for f in with_backfill.tiers.values() for w in f.waits]
    waits_without = [w for f in without.tiers.values() for w in f.waits]
    assert (percentile(waits_with, 90) or 0.0) < (percentile(waits_without, 90) or 0.0)


def test_regions_route_by_wait_and_keep_resident_data_home(plan_settings: Settings) -> None:
    regions = built_in("regions").model_copy(update={"horizon_seconds": 2400.0, "warmup_seconds": 600.0})
    sim = Simulation(regions, plan_settings)
    result = sim.run()
    assert result.remote_jobs > 0  # some jobs went where the wait was shorter
    homes = {j.home for j in sim.jobs}
    assert homes == {"us", "eu", "ap"}
    # eu's data may not leave (remote_penalty_seconds: None); the others' may, at a price.
    assert all(j.queue == "h100@eu" for j in sim.jobs if j.home == "eu")
    moved = [j for j in sim.jobs if j.queue != f"h100@{j.home}"]
    assert moved and all(j.penalty == 45.0 for j in moved)
    assert result.accepted_total == result.completed_total + result.failed_total + result.open_at_end
