"""What ``leasehold plan`` prints: one run's figures, the fleet search, and the seed's answers.

Every figure comes from ``RunResult``s of ``engine.simulate``; this module only chooses what
to run (a bisection per GPU class, the seed's what-ifs) and formats it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from leasehold.settings import Settings
from planning.engine import simulate
from planning.results import RunResult
from planning.scenario import Scenario, parse_scenario
from planning.scenarios import seed_pools

# The checkpoint intervals the seed's sweep compares.
CHECKPOINT_SWEEP_SECONDS = (10.0, 30.0, 60.0, 120.0, 300.0)
# Bisection of a fleet stops when the bracket is this narrow (GPUs) or after this many runs.
FLEET_RESOLUTION = 0.01
MAX_FLEET_RUNS = 9


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (nearest rank); ``None`` for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass
class Summary:
    """The headline figures of one run."""

    waits: dict[str, tuple[float | None, float | None, float | None]]
    etas: dict[str, tuple[float | None, float | None, float | None]]
    eta_error_p90: dict[str, float | None]
    rates: dict[str, tuple[float, float]]  # tier -> (429 share, 503 share) of submits
    goodput: float  # useful GPU-seconds / held GPU-seconds
    utilisation: float  # busy / held
    lost_gpu_hours: float
    overhead_gpu_hours: float
    preempted_job_share: float
    max_lost_per_preemption: float
    cost_per_video: float | None
    cost_per_useful_gpu_hour: float | None
    cost_per_hour: float
    busy_cost_per_video: float | None  # the GPU time a video keeps busy, at the blended price
    dispatch_share: dict[str, float]  # tier -> share of hand-outs from the backlog
    held_gpus: float
    completed: int
    open_at_end: int
    remote_share: float


def summarise(result: RunResult) -> Summary:
    held = sum(result.held_gpu_seconds.values())
    waits, etas, errors, rates = {}, {}, {}, {}
    for tier, figures in result.tiers.items():
        waits[tier] = (percentile(figures.waits, 50), percentile(figures.waits, 90), percentile(figures.waits, 99))
        etas[tier] = (
            percentile(figures.predicted, 50),
            percentile(figures.predicted, 90),
            percentile(figures.predicted, 99),
        )
        errors[tier] = percentile([abs(e) for e in figures.eta_errors], 90)
        submitted = max(1, figures.submitted)
        rates[tier] = (figures.refused_429 / submitted, figures.refused_503 / submitted)
    accepted = sum(f.accepted for f in result.tiers.values())
    return Summary(
        waits=waits,
        etas=etas,
        eta_error_p90=errors,
        rates=rates,
        goodput=result.useful_gpu_seconds / held if held else 0.0,
        utilisation=result.busy_gpu_seconds / held if held else 0.0,
        lost_gpu_hours=result.lost_gpu_seconds / 3600.0,
        overhead_gpu_hours=result.overhead_gpu_seconds / 3600.0,
        preempted_job_share=result.jobs_preempted / accepted if accepted else 0.0,
        max_lost_per_preemption=max(result.lost_per_preemption, default=0.0),
        cost_per_video=result.cost_usd / result.completed_in_window if result.completed_in_window else None,
        cost_per_useful_gpu_hour=(
            result.cost_usd / (result.useful_gpu_seconds / 3600.0) if result.useful_gpu_seconds else None
        ),
        cost_per_hour=result.cost_usd / (result.window / 3600.0),
        busy_cost_per_video=(
            result.cost_usd * (result.busy_gpu_seconds / held) / result.completed_in_window
            if result.completed_in_window and held
            else None
        ),
        dispatch_share={
            tier: f.dispatched / max(1, sum(g.dispatched for g in result.tiers.values()))
            for tier, f in result.tiers.items()
        },
        held_gpus=held / result.window,
        completed=result.completed_in_window,
        open_at_end=result.open_at_end,
        remote_share=result.remote_jobs / result.accepted_total if result.accepted_total else 0.0,
    )


def meets_target(result: RunResult, target: float, q: float) -> bool:
    """Every tier's ``q``-th percentile wait is within ``target`` and no free submit was shed."""
    for figures in result.tiers.values():
        wait = percentile(figures.waits, q)
        if wait is None or wait > target or figures.refused_503:
            return False
    return True


def scaled(scenario: Scenario, gpu_class: str, total: int) -> Scenario:
    """``scenario`` with ``gpu_class``'s pools scaled to ``total`` GPUs (their mix kept)."""
    data = scenario.model_dump()
    pools = [p for p in data["pools"] if p["gpu_class"] == gpu_class]
    now = sum(p["gpus"] for p in pools)
    left = total
    for i, pool in enumerate(pools):
        share = pool["gpus"] / now if now else 1.0 / len(pools)
        pool["gpus"] = left if i == len(pools) - 1 else round(total * share)
        left -= pool["gpus"]
    return parse_scenario(data, scenario.name)


@dataclass
class FleetSearch:
    """The smallest fleet of one class meeting the target wait, and the runs that found it."""

    gpu_class: str
    gpus: int | None
    runs: list[tuple[int, float | None, bool]] = field(default_factory=list)  # gpus, worst pN wait, met
    result: RunResult | None = None


def smallest_fleet(
    scenario: Scenario,
    settings: Settings,
    gpu_class: str,
    target: float,
    q: float,
    progress: Callable[[str], None] = lambda _line: None,
) -> FleetSearch:
    """Bisect the GPUs of ``gpu_class`` (other classes fixed) for the target wait.

    Runs share their arrivals (one seed), so a larger fleet sees the same jobs: the wait falls
    with the fleet up to preemption noise, and bisection is sound to the resolution reported.
    """
    search = FleetSearch(gpu_class, None)
    work = 0.0
    for shape in scenario.shapes:
        if scenario.shape_class(shape) == gpu_class:
            work += shape.share * shape.gpu_seconds * shape.gpus
    work *= scenario.arrivals_per_second() / sum(s.share for s in scenario.shapes)
    most_gang = max((s.gpus for s in scenario.shapes if scenario.shape_class(s) == gpu_class), default=1)
    low = max(most_gang, math.floor(work))  # Little's law: fewer cannot keep up at all
    high = max(low + 1, math.ceil(work * 1.25) + most_gang)

    def attempt(gpus: int) -> RunResult:
        result = simulate(scaled(scenario, gpu_class, gpus), settings)
        worst = max((percentile(f.waits, q) or 0.0) for f in result.tiers.values())
        met = meets_target(result, target, q)
        search.runs.append((gpus, worst, met))
        progress(f"  {gpu_class}: {gpus} GPUs -> worst p{q:g} wait {worst:.0f} s ({'meets' if met else 'misses'})")
        return result

    best = attempt(high)
    if not meets_target(best, target, q):
        high = max(high * 2, high + 8)
        best = attempt(high)
        if not meets_target(best, target, q):
            return search
    runs = 2
    while high - low > max(1, FLEET_RESOLUTION * high) and runs < MAX_FLEET_RUNS:
        middle = (low + high) // 2
        result = attempt(middle)
        runs += 1
        if meets_target(result, target, q):
            high, best = middle, result
        else:
            low = middle
    search.gpus = high
    search.result = best
    return search


def _spot_share(scenario: Scenario) -> float:
    total = sum(p.gpus for p in scenario.pools)
    return sum(p.gpus for p in scenario.pools if p.purchase == "preemptible") / total if total else 0.0


def _s(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 3600:
        return f"{value / 3600:.1f} h"
    if value >= 120:
        return f"{value / 60:.1f} min"
    return f"{value:.1f} s"


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:,.4f}" if value < 1 else f"${value:,.2f}"


def describe(result: RunResult, title: str) -> list[str]:
    """One run's figures as report lines."""
    summary = summarise(result)
    lines = [f"## {title}"]
    lines.append(
        f"window {result.window:.0f} s, accepted {result.accepted_per_second:.2f}/s x "
        f"{result.mean_work_per_job:.0f} GPU-s; held {summary.held_gpus:.0f} GPUs on average, "
        f"checkpoint every {result.checkpoint_interval:g} s"
    )
    lines.append("tier   wait p50 / p90 / p99            ETA told p50 / p90 / p99         |ETA err| p90   429    503")
    for tier in result.tiers:
        w, e = summary.waits[tier], summary.etas[tier]
        r429, r503 = summary.rates[tier]
        lines.append(
            f"{tier:<6} {_s(w[0]):>9} {_s(w[1]):>9} {_s(w[2]):>9}      "
            f"{_s(e[0]):>9} {_s(e[1]):>9} {_s(e[2]):>9}      {_s(summary.eta_error_p90[tier]):>9}  "
            f"{r429:6.1%} {r503:6.1%}"
        )
    lines.append(
        f"goodput {summary.goodput:.1%} of held GPU time, utilisation {summary.utilisation:.1%}; "
        f"lost work {summary.lost_gpu_hours:.1f} GPU-h (max {summary.max_lost_per_preemption:.1f} s per "
        f"preemption), overhead {summary.overhead_gpu_hours:.1f} GPU-h; "
        f"{summary.preempted_job_share:.1%} of jobs preempted"
    )
    if sum(f.dispatched for f in result.tiers.values()):
        shares = ", ".join(f"{tier} {share:.0%}" for tier, share in summary.dispatch_share.items())
        lines.append(f"hand-outs from the backlog (jobs that had to wait): {shares}")
    lines.append(
        f"cost {_usd(summary.cost_per_hour)}/h: {_usd(summary.cost_per_video)} per video, "
        f"{_usd(summary.cost_per_useful_gpu_hour)} per useful GPU-hour"
        + (f"; {summary.remote_share:.1%} of jobs ran away from their data" if summary.remote_share else "")
        + (f"; {summary.open_at_end} jobs still open at the end" if summary.open_at_end else "")
    )
    return lines


@dataclass
class Report:
    """What the command prints and plots."""

    lines: list[str] = field(default_factory=list)
    results: dict[str, RunResult] = field(default_factory=dict)
    searches: list[FleetSearch] = field(default_factory=list)
    sweep: list[tuple[float, RunResult]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def plan_report(scenario: Scenario, settings: Settings, progress: Callable[[str], None] = lambda _line: None) -> Report:
    """The report of any scenario: its run, and the smallest fleet per class for its target."""
    report = Report()
    target = scenario.target_wait_seconds or settings.video_target_wait_seconds
    base = simulate(scenario, settings)
    report.results["base"] = base
    report.lines += [f"# leasehold plan: {scenario.name}", *describe(base, "as given")]
    report.lines.append(f"## smallest fleet per class for p{scenario.target_percentile:g} wait <= {_s(target)}")
    for gpu_class in scenario.gpu_classes:
        search = smallest_fleet(scenario, settings, gpu_class, target, scenario.target_percentile, progress)
        report.searches.append(search)
        given = sum(p.gpus for p in scenario.pools if p.gpu_class == gpu_class)
        if search.gpus is None:
            report.lines.append(f"{gpu_class}: not met within {max(g for g, _w, _m in search.runs)} GPUs")
        else:
            report.lines.append(f"{gpu_class}: {search.gpus} GPUs (given {given}; {len(search.runs)} runs)")
    return report


def seed_report(scenario: Scenario, settings: Settings, progress: Callable[[str], None] = lambda _line: None) -> Report:
    """The seed's envelope: fleet for 10/s x 240 s with 5 % preemption, the free tier under a
    reclaim of a third of the preemptible GPUs, cost at 70 % spot, checkpoint interval."""
    report = Report()
    target = scenario.target_wait_seconds or settings.video_target_wait_seconds
    q = scenario.target_percentile
    rate = scenario.arrivals_per_second()
    mean = scenario.mean_gpu_seconds()
    little = rate * mean
    report.lines.append(f"# leasehold plan: {scenario.name}")
    report.lines.append(
        f"Little's law: {rate:g} jobs/s x {mean:.0f} GPU-s = {little:,.0f} GPUs busy; the seed adds 10 % "
        f"({little * 1.1:,.0f}). Policies from settings: paid:free weights "
        f"{settings.video_paid_weight:g}:{settings.video_free_weight:g}, per-user cap "
        f"{settings.video_paid_max_queued}/{settings.video_free_max_queued} queued, free shed past "
        f"{_s(settings.video_free_max_wait_seconds)}, heartbeat timeout {settings.video_heartbeat_timeout_seconds:g} s"
    )

    # 1. The fleet.
    gpu_class = scenario.gpu_classes[0]
    progress("1. smallest fleet ...")
    search = smallest_fleet(scenario, settings, gpu_class, target, q, progress)
    report.searches.append(search)
    if search.gpus is None or search.result is None:
        report.lines.append("1. no fleet within the searched range meets the target")
        return report
    fleet = search.gpus
    report.results["fleet"] = search.result
    summary = summarise(search.result)
    report.lines.append(
        f"## 1. Fleet for {rate:g}/s at {mean:.0f} s mean with {summary.preempted_job_share:.1%} of jobs preempted"
    )
    report.lines.append(
        f"smallest fleet with every tier's p{q:g} wait <= {_s(target)}: {fleet:,} GPUs "
        f"({fleet / little - 1:+.1%} over Little's {little:,.0f}; the seed's 2,640 is "
        f"{2640 / fleet - 1:+.1%} from it)"
    )
    report.lines += describe(search.result, f"the fleet of {fleet:,} GPUs")[1:]

    seed = _SeedFleet(report, scenario, settings, gpu_class, fleet, search.result, progress)
    _seed_reclaim(seed)
    _seed_cost(seed)
    _seed_checkpoints(seed)
    return report


@dataclass(frozen=True)
class _SeedFleet:
    """What the seed report's sections 2 to 4 start from: the smallest fleet section 1 found
    (``fleet`` GPUs of ``gpu_class``, its run ``result``), and where they write."""

    report: Report
    scenario: Scenario
    settings: Settings
    gpu_class: str
    fleet: int
    result: RunResult
    progress: Callable[[str], None]


def _seed_reclaim(seed: _SeedFleet) -> None:
    # 2. A third of the preemptible GPUs reclaimed in ten minutes.
    report, scenario, settings = seed.report, seed.scenario, seed.settings
    seed.progress("2. reclaim ...")
    start = scenario.warmup_seconds + 300.0
    data = scaled(scenario, seed.gpu_class, seed.fleet).model_dump()
    for pool in data["pools"]:
        if pool["purchase"] == "preemptible":
            pool["reclaims"] = [{"at_seconds": start, "share": 1 / 3, "over_seconds": 600.0}]
    data["warmup_seconds"] = start
    data["horizon_seconds"] = max(data["horizon_seconds"], start + 1200.0)
    reclaim = simulate(parse_scenario(data, "seed-reclaim"), settings)
    report.results["reclaim"] = reclaim
    rs = summarise(reclaim)
    free = rs.waits.get("free", (None, None, None))
    report.lines.append("## 2. A third of the preemptible GPUs reclaimed over ten minutes")
    report.lines.append(
        f"free tier: wait p50 {_s(free[0])}, p90 {_s(free[1])}, p99 {_s(free[2])}; "
        f"{rs.rates.get('free', (0.0, 0.0))[1]:.1%} of free submits refused (503) and "
        f"{rs.rates.get('free', (0.0, 0.0))[0]:.1%} capped (429); paid p90 {_s(rs.waits.get('paid', (None,) * 3)[1])}"
    )
    report.lines += describe(reclaim, "the 20 minutes from the reclaim's start")[1:]


def _seed_cost(seed: _SeedFleet) -> None:
    # 3. Cost per video at 70 % spot (and all reserved, for comparison).
    report, scenario, q = seed.report, seed.scenario, seed.scenario.target_percentile
    seed.progress("3. cost ...")
    report.lines.append("## 3. Cost per video")
    given_share = _spot_share(scenario)
    for share in (given_share, 0.0):
        if share == given_share:
            result = seed.result  # the fleet's own run (plotted as "fleet")
        else:
            data = scenario.model_dump()
            spot: dict[str, Any] = next((p for p in data["pools"] if p["purchase"] == "preemptible"), {})
            keep = ("preemptions_per_gpu_hour", "warning_seconds", "warned_share", "replace_seconds")
            data["pools"] = seed_pools(seed.fleet, share, **{k: spot[k] for k in keep if k in spot})
            result = simulate(parse_scenario(data, f"seed-spot-{share:g}"), seed.settings)
            report.results[f"spot-{share:g}"] = result
        s = summarise(result)
        report.lines.append(
            f"{share:.0%} spot: {_usd(s.cost_per_video)} per video, {_usd(s.cost_per_useful_gpu_hour)} per useful "
            f"GPU-hour, {_usd(s.cost_per_hour)}/h; goodput {s.goodput:.1%}, "
            f"{s.preempted_job_share:.1%} of jobs preempted, worst p{q:g} wait "
            f"{_s(max((w[1] or 0.0) for w in s.waits.values()))}"
        )


def _seed_checkpoints(seed: _SeedFleet) -> None:
    # 4. The checkpoint interval.
    report = seed.report
    seed.progress("4. checkpoint interval ...")
    report.lines.append("## 4. Checkpoint interval (2 s per checkpoint write, 5 s per resume)")
    report.lines.append(
        "interval   goodput   lost GPU-h   overhead GPU-h   max lost/preemption   GPUs busy   $/video busy   worst p90"
    )
    fleet_scenario = scaled(seed.scenario, seed.gpu_class, seed.fleet)
    for interval in CHECKPOINT_SWEEP_SECONDS:
        if interval == seed.result.checkpoint_interval:
            result = seed.result
        else:
            result = simulate(fleet_scenario, seed.settings, checkpoint_interval=interval)
        report.sweep.append((interval, result))
        s = summarise(result)
        report.lines.append(
            f"{interval:>6.0f} s   {s.goodput:6.1%}   {s.lost_gpu_hours:10.1f}   {s.overhead_gpu_hours:14.1f}   "
            f"{s.max_lost_per_preemption:17.1f} s   {result.mean_busy:9,.0f}   {_usd(s.busy_cost_per_video):>12}   "
            f"{_s(max((w[1] or 0.0) for w in s.waits.values())):>9}"
        )
    report.lines.append(
        "(GPUs busy: what Little's law sizes the fleet for at that interval; $/video busy: the GPU time a video "
        "keeps busy, at the fleet's blended price)"
    )
