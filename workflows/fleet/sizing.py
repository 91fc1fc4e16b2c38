"""How many GPU workers each pool of the fleet should have: the fleet controller's rule.

Pure and deterministic (the ``FleetWorkflow`` runs it, and ``bench/fleet.py`` replays it).
Per ``<model>[.<class>]`` and tier, from what the capacity tracker measured (the same
estimator the ETA uses): Little's law on the arrivals (rate x mean job time) plus the work
waiting and running spread over the target wait, never fewer than the jobs running and never
more than the jobs there are (plus the arrivals'). Paid work is sized onto reserved capacity,
free work onto preemptible, less what reserved capacity has to spare (a reserved worker is
paid for anyway); paid work beyond the reserved maximum spills to preemptible. Each pool is
then held to its minimum and maximum, and the fleet to its cost ceiling (free work's capacity
is cut first). A pool grows at once and shrinks only after ``scale_down_after_ticks`` ticks in
a row wanted fewer, to the most it wanted over them.
"""

from __future__ import annotations

import math

from workflows.fleet.types import FleetObservation, FleetPool, FleetSpec, GroupDemand, PoolDecision


def tier_need(demand: GroupDemand, tier: str, target_wait: float) -> tuple[int, dict[str, float]]:
    """Workers the ``tier``'s jobs of a group need now, and the figures it came from."""
    rate = demand.arrivals_per_second.get(tier, 0.0)
    little = rate * demand.job_seconds.get(tier, demand.mean_job_seconds)
    work = demand.work_seconds.get(tier, 0.0)
    running = demand.running.get(tier, 0)
    jobs = demand.queued.get(tier, 0) + running
    need = max(running, math.ceil(little + work / target_wait - 1e-9))
    # More workers than jobs (and than arrivals keep busy) would only idle.
    need = min(need, jobs + math.ceil(little - 1e-9))
    inputs = {
        f"{tier}_queued": float(demand.queued.get(tier, 0)),
        f"{tier}_running": float(running),
        f"{tier}_work_seconds": round(work, 1),
        f"{tier}_arrivals_per_minute": round(rate * 60, 3),
    }
    return need, inputs


def _clamp(value: int, pool: FleetPool) -> int:
    return max(pool.min_workers, min(pool.max_workers, value))


def wanted_workers(spec: FleetSpec, observation: FleetObservation) -> dict[str, tuple[int, str, dict[str, float]]]:
    """Each pool's wanted size before hysteresis: (workers, reason, inputs)."""
    wanted: dict[str, tuple[int, str, dict[str, float]]] = {}
    groups: dict[str, dict[str, FleetPool]] = {}
    for pool in spec.pools:
        groups.setdefault(pool.group, {})[pool.capacity_type] = pool
    for group, pools in groups.items():
        demand = observation.demand.get(group) or GroupDemand(group=group)
        paid, paid_inputs = tier_need(demand, "paid", spec.target_wait_seconds)
        free, free_inputs = tier_need(demand, "free", spec.target_wait_seconds)
        inputs = {
            **paid_inputs,
            **free_inputs,
            "mean_job_seconds": round(demand.mean_job_seconds, 1),
            "completions_per_minute": round(demand.completions_per_minute, 2),
        }
        reserved, preemptible = pools.get("reserved"), pools.get("preemptible")
        if reserved is not None and preemptible is not None:
            r = _clamp(paid, reserved)
            spare = max(0, r - paid)
            spill = max(0, paid - r)
            p = _clamp(max(0, free - spare) + spill, preemptible)
            wanted[reserved.key] = (r, f"paid work needs {paid}", inputs)
            wanted[preemptible.key] = (
                p,
                f"free work needs {free}, reserved spare {spare}, paid spill {spill}",
                inputs,
            )
        else:
            (only,) = pools.values()
            wanted[only.key] = (_clamp(paid + free, only), f"all work needs {paid + free}", inputs)
    return wanted


def within_ceiling(spec: FleetSpec, desired: dict[str, int]) -> tuple[dict[str, int], set[str]]:
    """``desired`` cut to the cost ceiling: preemptible pools first (free work), then reserved,
    the dearest worker first, never below a pool's minimum. Returns the sizes and the cut pools."""
    ceiling = spec.cost_ceiling_per_hour
    sized = dict(desired)
    cut: set[str] = set()
    if ceiling is None:
        return sized, cut
    order = sorted(spec.pools, key=lambda p: (p.capacity_type != "preemptible", -p.gpu_hour_cost))
    by_key = {p.key: p for p in spec.pools}
    while sum(sized[k] * by_key[k].gpu_hour_cost for k in sized) > ceiling + 1e-9:
        pool = next((p for p in order if sized[p.key] > p.min_workers and p.gpu_hour_cost > 0), None)
        if pool is None:
            break  # the minimums alone cost more: they win (an operator's floor)
        sized[pool.key] -= 1
        cut.add(pool.key)
    return sized, cut


def decide(
    spec: FleetSpec, observation: FleetObservation, current: dict[str, int], shrinking: dict[str, list[int]]
) -> tuple[list[PoolDecision], dict[str, list[int]]]:
    """Every pool's decision this tick, and the shrink streaks to carry to the next."""
    wanted = wanted_workers(spec, observation)
    sized, cut = within_ceiling(spec, {k: w[0] for k, w in wanted.items()})
    decisions: list[PoolDecision] = []
    streaks: dict[str, list[int]] = {}
    for pool in spec.pools:
        want, reason, inputs = wanted[pool.key]
        target = sized[pool.key]
        if pool.key in cut:
            reason += f"; cost ceiling {spec.cost_ceiling_per_hour:g}/h"
        now = current.get(pool.key, 0)
        desired = target
        if target < now and now <= pool.max_workers:
            ticks, most = shrinking.get(pool.key, [0, 0])
            ticks, most = ticks + 1, max(most, target) if ticks else target
            if ticks < spec.scale_down_after_ticks:
                streaks[pool.key] = [ticks, most]
                desired = now
                reason += f"; shrink held ({ticks}/{spec.scale_down_after_ticks})"
            else:
                desired = most
                reason += f"; shrink after {ticks} ticks"
        decisions.append(
            PoolDecision(key=pool.key, current=now, wanted=want, desired=desired, reason=reason, inputs=inputs)
        )
    return decisions, streaks


def cost_per_hour(spec: FleetSpec, sizes: dict[str, int]) -> float:
    return sum(sizes.get(p.key, 0) * p.gpu_hour_cost for p in spec.pools)
