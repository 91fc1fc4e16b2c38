"""The plan of one model version's queue: in what order and when its waiting jobs start.

Pure computation over a measured snapshot (``video_policy.eta``):

* Dispatch order = what Temporal's fairness does with the waiting jobs' fairness keys and
  weights: stride scheduling. The server gives a task that has to wait the pass
  ``max(the queue's ack level, its key's last pass + 1 / weight)`` and hands waiting tasks
  out in pass order; the ack level is the pass of the last task handed out, so a key that
  fell behind (no task waiting for a while) is served next. A task that
  finds a worker polling is matched at once and takes no pass. ``FairnessShadow`` replays
  exactly that from what the refreshes see (arrivals, starts), so a free job that arrived
  late behind a paid backlog holds the pass the server gave it then, not the one it would
  get if everything waiting now had arrived together.
* Queue wait = a simulation of the next dispatches onto the workers that serve the model
  now, each free once its running job's remaining work is done, taking the jobs waiting now
  and the jobs each fairness key is expected to add meanwhile (its measured arrival rate).
  With equal jobs and no arrivals this is exactly "jobs ahead / completion rate"; with mixed
  lengths it weighs each job by its own run time; it follows the live worker count at once
  (a completion rate measured over a window would lag a reclaimed third of the fleet by that
  window); and a free job behind a paid backlog waits, as it will, for the paid work that
  keeps arriving with earlier passes (its tier's share of dispatches, not the queue's order
  at submit, sets its wait).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from video_policy.eta import ArrivalStream, JobCosts, ModelSnapshot, QueuedJob, RunningJob

# Below this many waiting jobs a submit between two snapshots is placed by an exact re-plan
# (about a millisecond); above, by updating the snapshot's plan (``place``).
PLACE_EXACT_BELOW = 200
# Temporal's fairness weights live in this range; weights outside it are clamped by the server.
MIN_FAIRNESS_WEIGHT = 0.001
# Bound on the simulated dispatches of one plan.
MAX_SIMULATED_DISPATCHES = 5000
# Expected arrivals simulated past the last job waiting now (plus two per worker).
PLACE_BEYOND_DISPATCHES = 16
# Fairness keys (users) whose last pass the replay remembers.
MAX_FAIRNESS_KEYS = 10_000
# A job whose generation started this soon after its submit found a worker polling: the server
# matched it without writing it to the backlog, so it took no fairness pass.
DIRECT_MATCH_SECONDS = 1.0


class FairnessShadow:
    """The fairness state of one model's task queue, replayed from what the refreshes saw.

    Temporal keeps, per fairness key, the pass of its last task, and per queue an ack level
    (the pass of the last task handed out). A task that has to wait gets
    ``max(ack level, key's last pass + 1 / weight)`` (the server's map counter); waiting tasks
    go out in pass order, ties in arrival order. The
    server does not report passes, so this replays the rule over the events the API sees: a
    job's arrival (its submit time, from its memo) and its start (its generation activity's
    start time). Events are applied in time order within each refresh; an event seen a refresh
    late (visibility lag) is applied then, which errs by at most one refresh's events. A process
    that starts with a backlog replays it from the oldest waiting job with the ack level at 0:
    relative passes are all a plan needs.
    """

    def __init__(self) -> None:
        self.ack = 0.0
        self.counters: dict[str, float] = {}
        # Waiting jobs' passes (jobs matched directly have none).
        self.passes: dict[str, float] = {}
        self._arrived: set[str] = set()
        self._started: set[str] = set()

    def to_json(self) -> dict[str, Any]:
        return {
            "ack": self.ack,
            "counters": self.counters,
            "passes": self.passes,
            "arrived": sorted(self._arrived),
            "started": sorted(self._started),
        }

    def load_json(self, data: dict[str, Any]) -> None:
        self.ack = data["ack"]
        self.counters = dict(data["counters"])
        self.passes = dict(data["passes"])
        self._arrived = set(data["arrived"])
        self._started = set(data["started"])

    def update(
        self,
        arrivals: Iterable[tuple[str, float, str, float]],
        starts: Iterable[tuple[str, float]],
        open_ids: set[str],
        now: float,
    ) -> None:
        """Apply one refresh: ``arrivals`` (job id, submit time, key, weight) of every open job,
        ``starts`` (job id, start time) of every running job, ``open_ids`` all open jobs."""
        started = {job_id: at for job_id, at in starts}
        events: list[tuple[float, int, str, str, float]] = []
        for job_id, at, key, weight in arrivals:
            if job_id in self._arrived:
                continue
            self._arrived.add(job_id)
            start = started.get(job_id)
            if start is not None and start - at <= DIRECT_MATCH_SECONDS:
                self._started.add(job_id)  # matched at once: no pass
                continue
            events.append((at, 0, job_id, key, weight))
        for job_id, at in started.items():
            if job_id not in self._started:
                events.append((at, 1, job_id, "", 0.0))
        # Jobs that were waiting and are gone without being seen running started (and ended)
        # between two refreshes: handed out by now.
        for job_id in list(self.passes):
            if job_id not in open_ids and job_id not in started:
                events.append((now, 1, job_id, "", 0.0))
        for _at, kind, job_id, key, weight in sorted(events):
            if kind == 0:
                pass_ = next_pass(self.counters.get(key, 0.0), self.ack, weight)
                self.counters[key] = pass_
                self.passes[job_id] = pass_
            else:
                self._started.add(job_id)
                if job_id in self.passes:
                    self.ack = max(self.ack, self.passes.pop(job_id))
        # Forget closed jobs. Keys are kept even once behind the ack level: the next pass is
        # ``max(ack, last + 1/weight)``, so a last pass within one increment of the ack level
        # still counts (forgetting those put a user's next job a whole turn too early). The
        # server keeps its keys too (exactly up to 100, then in a sketch); here the highest
        # ``MAX_FAIRNESS_KEYS`` are kept.
        self._arrived &= open_ids
        self._started &= open_ids
        if len(self.counters) > MAX_FAIRNESS_KEYS:
            kept = sorted(self.counters.items(), key=lambda kv: kv[1])[-MAX_FAIRNESS_KEYS:]
            self.counters = dict(kept)


def next_pass(last: float, ack: float, weight: float) -> float:
    """The pass Temporal's fairness gives a task of a key whose last pass is ``last``."""
    return max(ack, last + 1.0 / _weight(weight))


@dataclass(frozen=True)
class Dispatch:
    """One simulated hand-out of a waiting task: its pass, when, whose, and which job ("" for an
    expected arrival)."""

    pass_: float
    start: float
    key: str
    job_id: str
    # Not a hand-out: a worker fell idle here (nothing waiting); a new job would start then.
    idle: bool = False


@dataclass(frozen=True)
class QueuePlan:
    """Where each queued job stands: its place in dispatch order and its expected start."""

    # job id -> (position, 1-based, counting jobs whose worker vanished first; seconds from now to start)
    starts: dict[str, tuple[int, float]]
    # job id -> expected seconds each running job (alive or stalled) still keeps its worker
    remaining: dict[str, float]
    workers: int
    # What ``place`` needs to put a job submitted since into this plan without re-simulating:
    # the hand-outs of waiting tasks in order, the workers still idle once the jobs waiting now
    # were matched, the positions taken before the first hand-out, the keys' last passes once
    # every job waiting now has its pass, the ack level then, and when the simulation stopped.
    dispatches: list[Dispatch] = field(default_factory=list)
    idle: int = 0
    positioned: int = 0
    counters: dict[str, float] = field(default_factory=dict)
    ack: float = 0.0
    horizon: float = 0.0


def place(plan: QueuePlan, job: QueuedJob, earlier: Sequence[QueuedJob], costs: JobCosts) -> tuple[int, float]:
    """Position and expected start of ``job``, submitted since ``plan`` was made after the jobs
    ``earlier`` (also unseen by it, in arrival order): the plan updated for it, not re-made.

    Each new job takes the pass the server gives it. A job of a key the plan expected to
    arrive takes the first such expected arrival left (the plan already made room for it);
    any other waits for the first hand-out of a later pass (or a worker falling idle). Each
    earlier new job ahead of it that took no expected arrival's place pushes it one hand-out on.
    Exact while new jobs arrive as their keys' measured rates say; the next snapshot re-plans.
    """
    counters = dict(plan.counters)

    def pass_of(queued: QueuedJob) -> float:
        pass_ = next_pass(counters.get(queued.fairness_key, 0.0), plan.ack, queued.fairness_weight)
        counters[queued.fairness_key] = pass_
        return pass_

    expected_by_key: dict[str, int] = {}
    for dispatch in plan.dispatches:
        if not dispatch.job_id and not dispatch.idle:
            expected_by_key[dispatch.key] = expected_by_key.get(dispatch.key, 0) + 1
    # Earlier new jobs: their passes, and whether each took an expected arrival's place.
    seen_by_key: dict[str, int] = {}
    before: list[tuple[float, float, bool]] = []
    for queued in earlier:
        index = seen_by_key.get(queued.fairness_key, 0)
        seen_by_key[queued.fairness_key] = index + 1
        absorbed = index < expected_by_key.get(queued.fairness_key, 0)
        before.append((pass_of(queued), costs.worker_seconds(queued.shape), absorbed))
    pass_ = pass_of(job)
    # Earlier new jobs ahead of it that took no expected arrival's place: each takes the next
    # idle worker, or else delays it by its run time shared among the workers.
    pending = [run for p, run, absorbed in before if p <= pass_ and not absorbed]
    ahead_new = sum(1 for p, _run, _absorbed in before if p <= pass_)
    idle_now = [Dispatch(math.inf, 0.0, "", "", idle=True)] * plan.idle
    own_before = seen_by_key.get(job.fairness_key, 0)
    own_seen = 0
    ahead = 0
    events = [*idle_now, *plan.dispatches]
    slot: int | None = None
    for index, dispatch in enumerate(events):
        if dispatch.idle:
            if pending:
                pending.pop(0)
                continue
            slot = index
            break
        if not dispatch.job_id and dispatch.key == job.fairness_key:
            if own_seen == own_before:
                slot = index
                break
            own_seen += 1
            continue
        if dispatch.pass_ > pass_:
            slot = index
            break
        if dispatch.job_id:
            ahead += 1
    position = plan.positioned + ahead + ahead_new + 1
    # Each earlier new job still ahead takes the hand-out it finds, pushing this one a hand-out on.
    if slot is not None and slot + len(pending) < len(events):
        return position, events[slot + len(pending)].start
    overflow = len(pending) - (len(events) - slot if slot is not None else 0)
    return position, plan.horizon + max(0, overflow) * costs.worker_seconds(job.shape) / max(1, plan.workers)


def plan(
    snapshot: ModelSnapshot,
    costs: JobCosts,
    extra: Iterable[QueuedJob] = (),
    arrivals: Iterable[ArrivalStream] = (),
    shadow: FairnessShadow | None = None,
) -> QueuePlan | None:
    """Expected start of every queued job (and of ``extra``: jobs submitted since the snapshot).

    A simulation of the next dispatches: workers free up as their running jobs' remaining
    work is done; each free worker takes the waiting task with the lowest fairness pass; the
    waiting tasks are those queued now and those the ``arrivals`` streams add meanwhile, each
    given the pass the server gives a new task of its key (its key's last pass plus
    ``1 / weight``, or the pass of the last dispatched task if that is later). Expected arrivals
    take turns but are not counted in positions: they are not ahead of anyone yet.

    ``shadow`` holds the passes the server gave the jobs waiting now and its keys' counters;
    without it (or for jobs it has not seen) passes are replayed in arrival order from 0.

    ``None`` when no worker serves the model: there is no honest number to give.
    """
    alive = [r for r in snapshot.running if r.alive]
    # Until each running job's worker is free again (not until the job closes).
    remaining = {r.job_id: costs.worker_remaining_seconds(r.shape, r.step) for r in snapshot.running}
    workers = max(snapshot.workers_serving, len(alive))
    if workers == 0:
        return None
    sim = _Simulation(_free_workers(alive, remaining, workers), costs)
    # A job whose worker vanished is handed out again before the backlog (its retry is due
    # first); it costs its remaining work, which resumes from its checkpoint.
    for stalled_job in (r for r in snapshot.running if not r.alive):
        start = heapq.heappop(sim.free)
        heapq.heappush(sim.free, start + remaining[stalled_job.job_id])
        sim.position += 1
    queue = sorted([*snapshot.queued, *extra], key=lambda j: (j.created_at, j.job_id))
    direct = sim.match_direct(queue)
    idle = sum(1 for at in sim.free if at <= 0.0)
    positioned = sim.position
    sim.seed_backlog(queue, direct, shadow)
    counters = dict(sim.passes)
    ack = sim.base
    # Past the last job waiting now, a few more expected arrivals are handed out, so that a job
    # submitted later finds its place among them (``place``).
    sim.run(queue, arrivals, beyond=2 * workers + PLACE_BEYOND_DISPATCHES)
    return QueuePlan(
        starts=sim.starts,
        remaining=remaining,
        workers=workers,
        dispatches=sim.dispatches,
        idle=idle,
        positioned=positioned,
        counters=counters,
        ack=ack,
        horizon=sim.free[0],
    )


def _free_workers(alive: list[RunningJob], remaining: dict[str, float], workers: int) -> list[float]:
    """When each serving worker is next free, as a heap: once its running job is done, or now."""
    free = sorted(remaining[r.job_id] for r in alive)[:workers]
    free += [0.0] * (workers - len(free))
    heapq.heapify(free)
    return free


class _Simulation:
    """The state of one plan's simulated dispatches (``plan``)."""

    def __init__(self, free: list[float], costs: JobCosts) -> None:
        self.free = free
        self.costs = costs
        self.position = 0
        self.starts: dict[str, tuple[int, float]] = {}
        self.passes: dict[str, float] = {}
        self.base = 0.0
        self.waiting_by_key: dict[str, int] = {}
        # (pass, arrival, tie-break, job id or "" for an expected arrival, key, run seconds)
        self.backlog: list[tuple[float, float, int, str, str, float]] = []
        self.dispatches: list[Dispatch] = []
        self.streams: list[ArrivalStream] = []
        self.upcoming: list[tuple[float, int]] = []
        self.tie = 0

    def match_direct(self, queue: list[QueuedJob]) -> int:
        """Start the first jobs on the idle workers; how many started."""
        # A task that finds a worker polling is handed to it at once (the server matches it
        # without backlogging it), so while workers are idle jobs start in arrival order: the
        # fairness pass only orders tasks that wait. Without this, a paid job submitted just after
        # a free one in the same burst was told it starts first, and the free one that it waits.
        direct = 0
        while direct < len(queue) and self.free[0] <= 0.0:
            job = queue[direct]
            heapq.heapreplace(self.free, self.costs.worker_seconds(job.shape))
            self.position += 1
            self.starts[job.job_id] = (self.position, 0.0)
            direct += 1
        return direct

    def seed_backlog(self, queue: list[QueuedJob], direct: int, shadow: FairnessShadow | None) -> None:
        """Put the jobs that wait (``queue`` past ``direct``) in the backlog with their passes."""
        known = shadow.passes if shadow is not None else {}
        self.passes = dict(shadow.counters) if shadow is not None else {}
        self.base = shadow.ack if shadow is not None else 0.0
        for order, job in enumerate(queue[direct:], start=direct):
            pass_ = known.get(job.job_id)
            if pass_ is None:
                # Not seen by the shadow yet (submitted since the last refresh): the pass the
                # server gives it now.
                pass_ = self._give_pass(job.fairness_key, job.fairness_weight)
            self.waiting_by_key[job.fairness_key] = self.waiting_by_key.get(job.fairness_key, 0) + 1
            self.backlog.append(
                (
                    pass_,
                    job.created_at,
                    order,
                    job.job_id,
                    job.fairness_key,
                    self.costs.worker_seconds(job.shape),
                )
            )
        heapq.heapify(self.backlog)

    def run(self, queue: list[QueuedJob], arrivals: Iterable[ArrivalStream], beyond: int) -> None:
        """Hand out waiting tasks until every job of ``queue`` has a start, then ``beyond`` more."""
        # Expected arrivals: evenly spaced at each key's rate, the first one interval from now.
        self.streams = [s for s in arrivals if s.per_second > 0]
        self.upcoming = [(1.0 / s.per_second, i) for i, s in enumerate(self.streams)]
        heapq.heapify(self.upcoming)
        targets = len(queue)
        self.tie = len(queue)
        for _ in range(MAX_SIMULATED_DISPATCHES):
            if len(self.starts) == targets:
                if beyond <= 0 or not self.upcoming:
                    break
                beyond -= 1
            now = self.free[0]
            self._arrive(now)
            if not self.backlog:
                if not self.upcoming:
                    break
                # Idle until the next expected arrival.
                if now > 0.0:  # workers idle from the start are counted in ``idle``
                    self.dispatches.append(Dispatch(math.inf, now, "", "", idle=True))
                heapq.heapreplace(self.free, self.upcoming[0][0])
                continue
            self._hand_out(now)
        else:
            # Out of simulation budget (only under absurd arrival rates): the rest start no
            # earlier than the simulated horizon.
            for job in queue:
                if job.job_id not in self.starts:
                    self.position += 1
                    self.starts[job.job_id] = (self.position, self.free[0])

    def _give_pass(self, key: str, weight: float) -> float:
        pass_ = next_pass(self.passes.get(key, 0.0), self.base, weight)
        self.passes[key] = pass_
        return pass_

    def _arrive(self, now: float) -> None:
        """Add to the backlog the expected arrivals due by ``now``."""
        while self.upcoming and self.upcoming[0][0] <= now:
            at, i = heapq.heappop(self.upcoming)
            stream = self.streams[i]
            heapq.heappush(self.upcoming, (at + 1.0 / stream.per_second, i))
            if self.waiting_by_key.get(stream.fairness_key, 0) >= stream.cap > 0:
                continue  # its user is at the cap: that submit is refused
            pass_ = self._give_pass(stream.fairness_key, stream.fairness_weight)
            self.waiting_by_key[stream.fairness_key] = self.waiting_by_key.get(stream.fairness_key, 0) + 1
            self.tie += 1
            heapq.heappush(self.backlog, (pass_, at, self.tie, "", stream.fairness_key, stream.run_seconds))

    def _hand_out(self, now: float) -> None:
        """Give the worker free first the waiting task with the lowest pass."""
        pass_, _at, _tie, job_id, key, run = heapq.heappop(self.backlog)
        self.base = max(self.base, pass_)
        self.waiting_by_key[key] -= 1
        start = heapq.heapreplace(self.free, now + run)
        self.dispatches.append(Dispatch(pass_, start, key, job_id))
        if job_id:
            self.position += 1
            self.starts[job_id] = (self.position, start)


def _weight(weight: float) -> float:
    return max(MIN_FAIRNESS_WEIGHT, weight)
