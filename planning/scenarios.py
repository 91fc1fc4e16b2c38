"""Built-in scenarios of ``leasehold plan --scenario NAME``.

* ``seed``: the seed's envelope (002): 10 submits a second at 240 s of GPU time on average (up
  to 15 minutes), a fleet of 2,640 (Little's 2,400 plus 10 %), 70 % of it preemptible at 40 %
  of the reserved price, preemption notices at a rate that touches about 5 % of jobs (half of
  them with a 30 s warning, half a hard kill), checkpoints that take 2 s to write.
* ``gang``: one H100 class shared by previews, single-GPU videos and 8-GPU gangs.
* ``regions``: two regions of unequal size, data mostly in the larger, one region's data under
  residency.
* ``small``: a few hundred short jobs on six workers, the shape of the calibration benchmark.
"""

from __future__ import annotations

from typing import Any

from planning.scenario import Scenario, parse_scenario

SEED_FLEET = 2640
SEED_SPOT_SHARE = 0.7

# Preemption notices at 1.1 per GPU-hour, half of them with a 30 s warning (the rest a hard kill).
NOTICES: dict[str, Any] = {"preemptions_per_gpu_hour": 1.1, "warning_seconds": 30.0, "warned_share": 0.5}
# Two hours of arrivals, the first twenty minutes not measured, two hours to drain.
TWO_HOURS: dict[str, Any] = {"horizon_seconds": 7200.0, "warmup_seconds": 1200.0, "drain_seconds": 7200.0}
# Checkpoints every 30 s (2 s to write, 5 s to resume), planning every 10 s, a two-minute target.
CHECKPOINTED: dict[str, Any] = {
    "checkpoint_interval_seconds": 30.0,
    "checkpoint_write_seconds": 2.0,
    "resume_seconds": 5.0,
    "refresh_seconds": 10.0,
    "target_wait_seconds": 120.0,
}


def tiers(paid: tuple[float, int], free: tuple[float, int], **each: Any) -> list[dict[str, Any]]:
    """The paid and free tiers: (submits per second, users) each, and what ``each`` adds to both."""
    return [
        {"tier": tier, "per_second": per_second, "users": users, **each}
        for tier, (per_second, users) in (("paid", paid), ("free", free))
    ]


def seed_pools(fleet: int, spot_share: float, **spot: Any) -> list[dict[str, Any]]:
    """The seed's fleet of ``fleet`` H100s, ``spot_share`` of them preemptible."""
    preemptible = round(fleet * spot_share)
    pools: list[dict[str, Any]] = [
        {"gpu_class": "h100", "purchase": "reserved", "gpus": fleet - preemptible, "usd_per_gpu_hour": 2.50},
    ]
    if preemptible:
        pools.append(
            {
                "gpu_class": "h100",
                "purchase": "preemptible",
                "gpus": preemptible,
                "usd_per_gpu_hour": 1.00,
                # 1.1 notices per GPU-hour: a 240 s job on a preemptible GPU is hit with
                # probability ~7 %, so ~5 % of all jobs with 70 % of the fleet preemptible.
                **NOTICES,
                "replace_seconds": 180.0,
                **spot,
            }
        )
    return pools


SEED: dict[str, Any] = {
    "name": "seed",
    "seed": 2,
    # Ten minutes to fill the fleet, fifteen measured (about four mean job times).
    "horizon_seconds": 1500.0,
    "warmup_seconds": 600.0,
    "drain_seconds": 3600.0,
    "tiers": tiers(paid=(3.0, 30_000), free=(7.0, 150_000)),
    # Mean 240 s of GPU time, long videos up to about 15 minutes.
    "shapes": [
        {"name": "4s", "share": 0.5, "gpu_seconds": 150.0, "cv": 0.25},
        {"name": "8s", "share": 0.3, "gpu_seconds": 240.0, "cv": 0.25},
        {"name": "12s-hd", "share": 0.2, "gpu_seconds": 465.0, "cv": 0.3},
    ],
    "pools": seed_pools(SEED_FLEET, SEED_SPOT_SHARE),
    # The seed's checkpoints: every 30 s, 2 s to write (the deployment's default interval, 10 s,
    # is sized for the CPU stand-in model; the sweep shows what it would cost here).
    "checkpoint_interval_seconds": 30.0,
    "checkpoint_write_seconds": 2.0,
    "resume_seconds": 5.0,
    # A 2,400-GPU queue is planned every minute of simulated time (the deployment: every 2 s;
    # the free tier's threshold is 30 minutes, so admission lags it by at most a minute).
    "refresh_seconds": 60.0,
    # The seed: "scheduling within 30 seconds when capacity exists".
    "target_wait_seconds": 30.0,
    "target_percentile": 90.0,
}

GANG: dict[str, Any] = {
    "name": "gang",
    "seed": 3,
    **TWO_HOURS,
    "tiers": tiers(paid=(0.05, 300), free=(0.1, 3000)),
    # Previews (the seed's 7.3) beside full videos and 8-GPU gangs for long high-resolution ones.
    "shapes": [
        {"name": "preview", "share": 0.5, "gpu_seconds": 30.0, "cv": 0.3},
        {"name": "single", "share": 0.35, "gpu_seconds": 240.0, "cv": 0.3},
        {"name": "gang-8", "share": 0.15, "gpu_seconds": 600.0, "cv": 0.3, "gpus": 8},
    ],
    "pools": [
        {"gpu_class": "h100", "purchase": "reserved", "gpus": 56, "usd_per_gpu_hour": 2.50},
        {
            "gpu_class": "h100",
            "purchase": "preemptible",
            "gpus": 80,
            "usd_per_gpu_hour": 1.00,
            **NOTICES,
            "replace_seconds": 180.0,
        },
    ],
    **CHECKPOINTED,
}

REGIONS: dict[str, Any] = {
    "name": "regions",
    "seed": 4,
    **TWO_HOURS,
    "tiers": tiers(paid=(0.1, 1000), free=(0.25, 10_000)),
    "shapes": [{"name": "8s", "share": 1.0, "gpu_seconds": 240.0, "cv": 0.3}],
    "regions": [
        {"name": "us", "data_share": 0.6, "remote_penalty_seconds": 45.0},
        {"name": "eu", "data_share": 0.3, "remote_penalty_seconds": None},
        {"name": "ap", "data_share": 0.1, "remote_penalty_seconds": 45.0},
    ],
    "pools": [
        {"gpu_class": "h100", "region": "us", "purchase": "reserved", "gpus": 44, "usd_per_gpu_hour": 2.50},
        {"gpu_class": "h100", "region": "eu", "purchase": "reserved", "gpus": 24, "usd_per_gpu_hour": 2.80},
        {
            "gpu_class": "h100",
            "region": "ap",
            "purchase": "preemptible",
            "gpus": 30,
            "usd_per_gpu_hour": 0.90,
            **NOTICES,
        },
    ],
    **CHECKPOINTED,
}

SMALL: dict[str, Any] = {
    "name": "small",
    "seed": 5,
    "horizon_seconds": 600.0,
    "warmup_seconds": 60.0,
    "drain_seconds": 1800.0,
    "tiers": tiers(paid=(0.2, 4), free=(0.4, 8), burst={"share": 0.2, "jobs": 3}),
    "shapes": [{"name": "tiny", "share": 1.0, "gpu_seconds": 8.0, "cv": 0.2}],
    "pools": [
        {"gpu_class": "cpu", "purchase": "reserved", "gpus": 3, "usd_per_gpu_hour": 2.5},
        {
            "gpu_class": "cpu",
            "purchase": "preemptible",
            "gpus": 3,
            "usd_per_gpu_hour": 1.0,
            "preemptions_per_gpu_hour": 6.0,
            "warned_share": 0.0,
            "replace_seconds": 20.0,
        },
    ],
    "checkpoint_write_seconds": 0.1,
    "resume_seconds": 0.5,
}

BUILT_IN: dict[str, dict[str, Any]] = {"seed": SEED, "gang": GANG, "regions": REGIONS, "small": SMALL}


def built_in(name: str) -> Scenario:
    """A built-in scenario by name (``KeyError`` when there is none)."""
    return parse_scenario(BUILT_IN[name], name)
