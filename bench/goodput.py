"""Goodput under real preemptions, checkpointing against restart-from-zero (what checkpointing
costs a job that is never preempted is ``bench.checkpoint_overhead``'s).

Goodput (``run``): useful GPU-seconds / worker-busy seconds of batches of identical jobs on
the one GPU worker of a real embedded stack (``leasehold up``), whose worker is preempted for
real: kill -9 (unwarned) or SIGTERM (the notice), after which the supervisor restarts it.
Three policies, the same jobs and preemption points for each (a paired comparison):
restart-from-zero (a stack whose worker runs with ``LEASEHOLD_VIDEO_CHECKPOINTS=false``, hit
by kill -9), and checkpointing every ``interval`` hit by kill -9 or by SIGTERM (a second stack).
The two stacks run side by side and their jobs, one at a time, alternate between them: on a
shared host the load drifts, and two batches run one after the other measured that drift
more than the policies.
"p % preemption": p % of the jobs (seeded, at least one) are preempted once, at a seeded
uniform point of their steps; the bench watches the job's heartbeats (step and the worker's
send time, throttled to about 1 s) and signals the worker when the extrapolated step passes
the point.

Where attempt start and end come from (one clock: the Temporal server and this process run
on the same host):

* start: the server's ``last_started_time`` of the pending activity (when it handed the
  attempt to the worker; restore and warm-up count as busy), seen by polling every 0.1 s;
  for the attempt that finished the job, its ActivityTaskStarted event, which the server
  writes when a retried activity ends, stamped with that attempt's start;
* end: the ActivityTaskCompleted event (the result reached the server); for kill -9 the
  moment of the kill (the worker's log and the heartbeat timeout say nothing sooner or more
  exact); for SIGTERM the server's ``last_attempt_complete_time`` (the attempt's Preempted
  failure arrived, after the notice checkpoint), so the worker's exit is not counted.

The activity result's ``gpu_seconds`` is not used: it leaves out restore, encode and upload,
which occupy the worker too. Heartbeat times are throttled and would cut attempts short.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import signal
import tempfile
import time
from datetime import UTC
from pathlib import Path
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter

from activities.video.definitions import GENERATE_VIDEO
from bench.report import Table, mean, percentile
from leasehold.temporal import connect
from testing.checker import History
from testing.stack import (
    SECONDS,
    SIZE,
    VIDEO_HEARTBEAT_TIMEOUT,
    EmbeddedStack,
    VideoClient,
    start_embedded,
    stop_embedded,
)
from workflows.video.job import VideoJobWorkflow
from workflows.video.types import GenerateProgress

# Goodput under real preemptions -------------------------------------------------------------

GPU = "worker gpu"
RATES = (0.05, 0.20)
# Where in its steps a preempted job is hit (uniform, seeded).
POINT_RANGE = (0.15, 0.85)
# Every job of every batch is this same request (the API's body; only the idempotency key differs).
PROMPT = "goodput: a paper boat on a grey pond"
SEED = 17
# Bounds: no wait in this benchmark is open-ended.
JOB_DEADLINE = 180.0
POLL = 0.1


@dataclasses.dataclass(frozen=True)
class Config:
    """Batch size, job length (steps) and checkpoint interval of one goodput measurement."""

    jobs: int
    steps: int
    interval: float


SHORT = Config(jobs=10, steps=200, interval=2.0)
FULL = Config(jobs=20, steps=500, interval=2.0)


@dataclasses.dataclass(frozen=True)
class Plan:
    """Which jobs are preempted at each rate, and where (fraction of steps); seeded, paired.

    The jobs preempted at a lower rate are among those preempted at a higher one, at the
    same points; every policy gets the same jobs and points.
    """

    config: Config
    preempted: dict[float, frozenset[int]]
    points: dict[int, float]

    @staticmethod
    def draw(config: Config, seed: int) -> Plan:
        rng = random.Random(f"{seed}/goodput")
        order = list(range(config.jobs))
        rng.shuffle(order)
        counts = {rate: max(1, round(rate * config.jobs)) for rate in RATES}
        points = {job: rng.uniform(*POINT_RANGE) for job in order[: max(counts.values())]}
        return Plan(config, {rate: frozenset(order[:k]) for rate, k in counts.items()}, points)

    def clean_jobs(self) -> list[int]:
        """Jobs some row counts unpreempted (all but those preempted at the lowest rate)."""
        return sorted(set(range(self.config.jobs)) - self.preempted[min(RATES)])


@dataclasses.dataclass
class Attempt:
    number: int
    started_at: float
    ended_at: float | None = None
    # "completed", "kill -9", "SIGTERM", or "timed out" (an attempt that lost its lease unasked).
    end: str = ""

    @property
    def busy(self) -> float:
        assert self.ended_at is not None
        return self.ended_at - self.started_at


@dataclasses.dataclass
class Run:
    """One job as it ran: its attempts on the worker, or why it could not be measured."""

    job: int
    signal: str  # "" (not preempted), "kill -9", "SIGTERM"
    point: float | None = None
    job_id: str | None = None
    attempts: list[Attempt] = dataclasses.field(default_factory=list)
    resumed_from_step: int | None = None
    # The step the last heartbeat before the signal reported, and the step the signal aimed at.
    step_at_signal: int | None = None
    target_step: int | None = None
    start_check: float | None = None
    wall: float = 0.0
    error: str | None = None

    @property
    def busy(self) -> float:
        return sum(a.busy for a in self.attempts)


class _SameJob(VideoClient):
    """Submits the same request every time (the chaos client varies the prompt by key)."""

    def body(self, key: str, steps: int) -> dict[str, Any]:
        return {**super().body(key, steps), "prompt": PROMPT, "seed": SEED}


@dataclasses.dataclass
class _Seen:
    """The generation activity as DescribeWorkflowExecution shows it."""

    closed: bool
    attempt: int = 0
    started_at: float | None = None
    # When the server recorded the end of the previous attempt (Temporal's own clock, this host).
    last_complete_at: float | None = None
    progress: GenerateProgress | None = None


def _ts(stamp: Timestamp) -> float | None:
    return stamp.ToDatetime(UTC).timestamp() if stamp.seconds or stamp.nanos else None


async def _look(handle: WorkflowHandle) -> _Seen:
    desc = await handle.describe()
    if desc.status != WorkflowExecutionStatus.RUNNING:
        return _Seen(closed=True)
    for pending in desc.raw_description.pending_activities:
        if pending.activity_type.name != GENERATE_VIDEO:
            continue
        progress = None
        if pending.heartbeat_details.payloads:
            [progress] = pydantic_data_converter.payload_converter.from_payloads(
                pending.heartbeat_details.payloads, [GenerateProgress]
            )
        started = pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        return _Seen(
            closed=False,
            attempt=pending.attempt,
            started_at=_ts(pending.last_started_time) if started else None,
            last_complete_at=_ts(pending.last_attempt_complete_time),
            progress=progress if progress is not None and progress.attempt == pending.attempt else None,
        )
    return _Seen(closed=False)


async def _final_attempt(handle: WorkflowHandle) -> tuple[int, float, float] | None:
    """(attempt, started, completed) of the generation attempt that finished the job, from history.

    The server writes a retried activity's started event when the attempt ends, stamped with
    that attempt's start; the completed event carries the moment the result arrived.
    """
    scheduled: set[int] = set()
    started: dict[int, tuple[int, float]] = {}
    found = None
    async for event in handle.fetch_history_events():
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == GENERATE_VIDEO:
                scheduled.add(event.event_id)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            if attrs.scheduled_event_id in scheduled:
                started[event.event_id] = (attrs.attempt, event.event_time.ToDatetime(UTC).timestamp())
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = event.activity_task_completed_event_attributes
            if done.started_event_id in started:
                attempt, at = started[done.started_event_id]
                found = (attempt, at, event.event_time.ToDatetime(UTC).timestamp())
    return found


async def _run_job(stack: EmbeddedStack, client: Client, video: VideoClient, run: Run, key: str, steps: int) -> None:
    """Submit one job, preempt it once at its point if it is to be, follow it to its end."""
    began = time.monotonic()
    deadline = began + JOB_DEADLINE
    job_id = await asyncio.to_thread(video.submit, key, steps)
    if job_id is None:
        run.error = "submit refused"
        return
    run.job_id = job_id
    handle = client.get_workflow_handle(f"video-{job_id}")
    attempts: dict[int, Attempt] = {}
    target = round(run.point * steps) if run.point is not None else None
    fired = False
    first: GenerateProgress | None = None  # this attempt's first heartbeat seen (step rate)
    try:
        while True:
            if time.monotonic() > deadline:
                run.error = f"not done in {JOB_DEADLINE:.0f} s"
                return
            try:
                seen = await _look(handle)
            except Exception:  # the server busy for a moment: look again
                await asyncio.sleep(POLL)
                continue
            if seen.closed:
                break
            for number, attempt in attempts.items():
                # An attempt the server ended without our signal (a lease lost on a loaded host).
                if attempt.ended_at is None and seen.attempt > number and seen.last_complete_at is not None:
                    attempt.ended_at, attempt.end = seen.last_complete_at, attempt.end or "timed out"
            if seen.started_at is not None and seen.attempt not in attempts:
                attempts[seen.attempt] = Attempt(seen.attempt, seen.started_at)
                first = None
            if target is not None and not fired and seen.progress is not None and seen.attempt in attempts:
                now_progress = seen.progress
                if first is None:
                    first = now_progress
                due = now_progress.step >= target
                if not due and now_progress.step > first.step and now_progress.sent_at > first.sent_at:
                    # Heartbeats are throttled (about 1 s): extrapolate to the step the point names.
                    rate = (now_progress.sent_at - first.sent_at) / (now_progress.step - first.step)
                    eta = now_progress.sent_at + (target - now_progress.step) * rate
                    if eta - time.time() <= 2 * POLL:
                        await asyncio.sleep(max(0.0, eta - time.time()))
                        due = True
                if due:
                    run.step_at_signal, run.target_step = now_progress.step, target
                    pid = stack.child_pid(GPU)
                    at = time.time()
                    os.kill(pid, signal.SIGKILL if run.signal == "kill -9" else signal.SIGTERM)
                    fired = True
                    attempt = attempts[seen.attempt]
                    attempt.end = run.signal
                    if run.signal == "kill -9":
                        attempt.ended_at = at
                    # SIGTERM: the attempt ends when its Preempted failure reaches the server
                    # (after the notice checkpoint), taken from the next look at the activity.
            await asyncio.sleep(POLL)
        await _settle(handle, run, attempts, fired)
    finally:
        run.wall = time.monotonic() - began
        if run.error is not None:
            try:
                await handle.cancel()
            except Exception:  # already closed
                pass


async def _settle(handle: WorkflowHandle, run: Run, attempts: dict[int, Attempt], fired: bool) -> None:
    """Once the job has closed: its finishing attempt from history, and whether every attempt
    was seen (``run.error`` says what was not)."""
    final = await _final_attempt(handle)
    state = await handle.query(VideoJobWorkflow.state)
    if final is None or state.result is None:
        run.error = f"job ended {state.status.value}"
        return
    number, started_at, completed_at = final
    if number in attempts:
        # The history's start of the last attempt against the one seen while it ran.
        run.start_check = started_at - attempts[number].started_at
    attempts[number] = Attempt(number, started_at, completed_at, "completed")
    run.resumed_from_step = state.result.resumed_from_step
    missing = [n for n in range(1, number + 1) if n not in attempts or attempts[n].ended_at is None]
    if missing:
        run.error = f"attempt {missing[0]} not observed"
    elif run.signal and not fired:
        run.error = "finished before its preemption point"
    run.attempts = [attempts[n] for n in sorted(attempts)]


def _start(root: Path, env: dict[str, str]) -> EmbeddedStack:
    root.mkdir(parents=True, exist_ok=True)
    return start_embedded(root, env)


async def _interleaved(root: Path, config: Config, batches: dict[str, list[Run]], seed: int, log: list[str]) -> float:
    """Both stacks side by side; their jobs run one at a time, alternating; returns the wall time.

    Jobs alternate between the settings (in proportion to their counts) so that the host's
    load, which drifts on a shared machine, falls on both alike.
    """
    began = time.monotonic()
    names = list(batches)
    results = await asyncio.gather(
        *(
            asyncio.to_thread(
                _start,
                root / f"goodput-{name}",
                {
                    "LEASEHOLD_CHECKPOINT_INTERVAL_SECONDS": f"{config.interval:g}",
                    "LEASEHOLD_VIDEO_CHECKPOINTS": "true" if name == "on" else "false",
                },
            )
            for name in names
        ),
        return_exceptions=True,
    )
    stacks: dict[str, EmbeddedStack] = {}
    try:
        for name, result in zip(names, results, strict=True):
            if isinstance(result, EmbeddedStack):
                stacks[name] = result
            else:
                log.append(f"stack (checkpoints {name}) did not start: {str(result)[:200]}")
                for r in batches[name]:
                    r.error = "stack did not start"
        clients = {name: await connect(stack.settings()) for name, stack in stacks.items()}
        videos = {
            name: _SameJob(stack.api_url, stack.new_key("goodput"), History(), "goodput", seconds=SECONDS)
            for name, stack in stacks.items()
        }
        order = sorted(
            ((n / len(runs), name, n, r) for name, runs in batches.items() for n, r in enumerate(runs)),
            key=lambda item: item[:3],
        )
        for _at, name, n, r in order:
            if name not in stacks:
                continue
            key = f"goodput-{seed}-{name}-{n}"
            try:
                # _run_job bounds its own waits; this also bounds an RPC that never answers.
                await asyncio.wait_for(
                    _run_job(stacks[name], clients[name], videos[name], r, key, config.steps), JOB_DEADLINE + 60
                )
            except Exception as exc:  # one job's failure is its cell's "n/a", not the bench's end
                r.error = r.error or f"{type(exc).__name__}: {exc}"[:120]
            if r.error:
                log.append(f"job {r.job} ({r.signal or 'clean'}, checkpoints {name}): {r.error}")
    finally:
        await asyncio.gather(*(asyncio.to_thread(stop_embedded, stack) for stack in stacks.values()))
    return time.monotonic() - began


def _cell(clean: float | None, useful_jobs: int, runs: list[Run]) -> tuple[str, str]:
    """(goodput, raw figures) of one cell: its runs against ``useful_jobs`` x the clean time."""
    failed = [r for r in runs if r.error]
    if failed:
        return f"n/a ({failed[0].error})", "-"
    if clean is None:
        return "n/a (no clean baseline job)", "-"
    useful = useful_jobs * clean
    busy = sum(r.busy for r in runs)
    wall = sum(r.wall for r in runs)
    return f"{useful / busy * 100:.1f} %", f"{useful:.1f} / {busy:.1f} s (jobs' wall {wall:.0f} s)"


def _batches(plan: Plan, seed: int) -> tuple[list[Run], list[Run]]:
    """The runs with checkpointing off and on, each in a seeded order."""
    rng = random.Random(f"{seed}/goodput-order")
    high = max(RATES)
    preempted = sorted(plan.preempted[high])
    clean_jobs = plan.clean_jobs()
    # Off: restart-from-zero, kill -9. On: the same clean jobs once, then kill -9 and SIGTERM.
    off = [Run(j, "") for j in clean_jobs] + [Run(j, "kill -9", plan.points[j]) for j in preempted]
    on = [Run(j, "") for j in clean_jobs]
    on += [Run(j, sig, plan.points[j]) for sig in ("kill -9", "SIGTERM") for j in preempted]
    # A seeded order, so slow drift of the host does not fall on one kind of job.
    rng.shuffle(off)
    rng.shuffle(on)
    return off, on


def _pick(config: Config, runs: list[Run], sig: str, jobs: frozenset[int]) -> list[Run]:
    """Each job of the batch once: its preempted run when ``jobs`` holds it, else its clean run."""
    by_job = {(r.job, r.signal): r for r in runs}
    return [by_job[(j, sig)] if j in jobs else by_job[(j, "")] for j in range(config.jobs)]


def _lost(runs: list[Run], sig: str, baseline: list[float]) -> str:
    """Busy seconds a preemption added to its job, over the median clean job of the same setting."""
    hit = [r.busy for r in runs if r.signal == sig and not r.error]
    if not hit or not baseline:
        return "n/a"
    base = percentile(baseline, 0.5)
    values = [b - base for b in hit]
    return f"mean {mean(values):.2f} s (min {min(values):.2f}, max {max(values):.2f}, n={len(values)})"


def _table(config: Config, plan: Plan, clean: float | None, off: list[Run], on: list[Run]) -> tuple[Table, list[str]]:
    """The goodput table's rows (one per preemption rate) and each row's raw figures."""
    table = Table(
        "Goodput under preemption (measured)",
        [
            "preemption",
            "preempted jobs",
            "restart-from-zero (baseline)",
            f"checkpoint every {config.interval:g} s + kill -9",
            f"checkpoint every {config.interval:g} s + SIGTERM",
        ],
    )
    raw = []
    policies = (("off", off, "kill -9"), ("on", on, "kill -9"), ("on", on, "SIGTERM"))
    for rate in RATES:
        jobs = plan.preempted[rate]
        cells = [_cell(clean, config.jobs, _pick(config, runs, sig, jobs)) for _name, runs, sig in policies]
        table.rows.append([f"{rate * 100:.0f} %", f"{len(jobs)} of {config.jobs}", *(c[0] for c in cells)])
        raw.append(f"{rate * 100:.0f} %: " + "; ".join(c[1] for c in cells))
    return table, raw


def _method_notes(config: Config, plan: Plan, off: list[Run], on: list[Run], raw: list[str], wall: float) -> list[str]:
    """The notes that say how the table was measured, with the clean times and lost seconds."""
    preempted = sorted(plan.preempted[max(RATES)])
    clean_off = [r.busy for r in off if not r.signal and not r.error]
    clean = percentile(clean_off, 0.5) if clean_off else None
    clean_on = [r.busy for r in on if not r.signal and not r.error]
    points = ", ".join(f"{plan.points[j] * 100:.0f} %" for j in preempted)
    clean_text = (
        f"{clean:.2f} s, p10-p90 {percentile(clean_off, 0.1):.2f}-{percentile(clean_off, 0.9):.2f} s"
        if clean is not None
        else "n/a"
    )
    clean_on_text = (
        f"{percentile(clean_on, 0.5):.2f} s, p10-p90 {percentile(clean_on, 0.1):.2f}-{percentile(clean_on, 0.9):.2f} s"
        if clean_on
        else "n/a"
    )
    return [
        f"Real preemptions of the GPU worker of `leasehold up` (embedded stack; the supervisor restarts it): "
        f"batches of {config.jobs} identical jobs ({SIZE}, {SECONDS} s, {config.steps} steps, one at a time on "
        f"one worker), checkpoint interval {config.interval:g} s (not the 10 s default), heartbeat timeout "
        f"{VIDEO_HEARTBEAT_TIMEOUT:g} s. Baseline: a worker with LEASEHOLD_VIDEO_CHECKPOINTS=false "
        "(no checkpoint, none at the notice, no resume), preempted by kill -9.",
        f"Preempted jobs (seeded, the same jobs and points for every policy; those of 5 % are among those of "
        f"20 %) are hit once at a uniform point of their steps ({POINT_RANGE[0]:.0%}-{POINT_RANGE[1]:.0%}; "
        f"here {points}), extrapolated from the job's heartbeats.",
        f"Goodput = useful GPU-seconds / worker-busy seconds. Useful = {config.jobs} x the clean job time "
        f"{clean_text} (median activity wall time of the baseline's unpreempted jobs; {clean_on_text} with "
        "checkpointing on). Busy = the sum over every attempt of its wall time on the worker: from the server's "
        "start of the attempt to its result, its kill -9, or (SIGTERM) its Preempted failure reaching the "
        "server. Idle time (heartbeat timeout, retry delay, worker restart) is not busy time.",
        "Unpreempted jobs are run once per setting (checkpointing off, on) and count in every row and both "
        "checkpointing columns: they are the same job with the same settings.",
        "Lost busy seconds per preemption (over the median clean job of the same setting): "
        f"restart-from-zero {_lost(off, 'kill -9', clean_off)}; checkpoint + kill -9 {_lost(on, 'kill -9', clean_on)}; "
        f"checkpoint + SIGTERM {_lost(on, 'SIGTERM', clean_on)}.",
        "Useful / busy per cell, in column order: " + " | ".join(raw),
        f"Wall time: {wall:.0f} s for both batches ({len(off)} jobs with checkpointing off, {len(on)} on), "
        "the two stacks side by side, jobs one at a time alternating between them so the host's drifting load "
        "falls on both alike; per cell, the jobs' own wall times (submit to end) are in the line above.",
    ]


def _source_check(off: list[Run], on: list[Run]) -> str:
    """The note comparing the history's attempt starts with those seen while the jobs ran."""
    checks = [abs(r.start_check) for r in (*off, *on) if r.start_check is not None]
    unasked = sum(1 for r in (*off, *on) for a in r.attempts if a.end == "timed out")
    return (
        f"Source check: the history's start of a finishing attempt was within {max(checks) * 1000:.0f} ms of the "
        f"start seen while it ran (n={len(checks)}); attempts that lost their lease unasked: {unasked}."
        if checks
        else "Source check: no finishing attempt was seen while it ran."
    )


async def run(root: Path, seed: int, config: Config, dump: Path | None = None) -> Table:
    """Goodput under real preemptions of the embedded stack's GPU worker; see the module docstring."""
    plan = Plan.draw(config, seed)
    off, on = _batches(plan, seed)
    log: list[str] = []
    try:
        wall = await _interleaved(root, config, {"off": off, "on": on}, seed, log)
    except Exception as exc:  # the cells say why; the rest of the bench goes on
        log.append(f"{type(exc).__name__}: {exc}"[:300])
        for r in (*off, *on):
            r.error = r.error or type(exc).__name__
        wall = float("nan")

    if dump is not None:
        runs_json = json.dumps({"off": [dataclasses.asdict(r) for r in off], "on": [dataclasses.asdict(r) for r in on]})
        await asyncio.to_thread(dump.write_text, runs_json)

    clean_off = [r.busy for r in off if not r.signal and not r.error]
    clean = percentile(clean_off, 0.5) if clean_off else None
    table, raw = _table(config, plan, clean, off, on)
    table.notes += _method_notes(config, plan, off, on, raw, wall)
    table.notes.append(_source_check(off, on))
    table.notes += [f"problem: {line}" for line in log[:5]]
    return table


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.goodput [--jobs N --steps S --interval I --seed X]``: the goodput table alone."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.goodput", description=main.__doc__)
    parser.add_argument("--jobs", type=int, default=SHORT.jobs)
    parser.add_argument("--steps", type=int, default=SHORT.steps)
    parser.add_argument("--interval", type=float, default=SHORT.interval)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--dump", type=Path, default=None, help="write every job's attempts here (JSON)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    with tempfile.TemporaryDirectory(prefix="leasehold-goodput-") as tmp:
        table = asyncio.run(run(Path(tmp), seed, Config(args.jobs, args.steps, args.interval), args.dump))
    print(f"seed {seed}")
    print(table.text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
