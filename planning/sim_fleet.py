"""The simulated fleet: GPU pools joining, the cloud taking GPUs back (notices, kills,
scheduled preemptions and reclaim waves), and what that does to the attempt on one.

Functions of the running ``Simulation``; the engine's event loop calls them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planning.scenario import Pool, ScheduledPreemption
from planning.sim_events import GONE, JOIN, PREEMPT, RECLAIM, RELEASE, RESTORE, RETRY, SCHEDULED
from planning.sim_state import Gpu, SimJob
from workflows.queues import VIDEO_GENERATE_RETRY

if TYPE_CHECKING:
    from planning.engine import Simulation

# A pool whose GPUs are all gone checks again for preemptions this often.
IDLE_POOL_RECHECK_SECONDS = 60.0


def queue_name(gpu_class: str, region: str) -> str:
    """The task queue of a GPU class in a region."""
    return f"{gpu_class}@{region}"


def retry_delay(failed_attempts: int) -> float:
    """Seconds before the next attempt after ``failed_attempts`` (``VIDEO_GENERATE_RETRY``)."""
    policy = VIDEO_GENERATE_RETRY
    initial = policy.initial_interval.total_seconds()
    most = policy.maximum_interval.total_seconds() if policy.maximum_interval else 100 * initial
    return min(most, initial * policy.backoff_coefficient ** max(0, failed_attempts - 1))


def start_pools(sim: Simulation) -> None:
    """Each pool's first GPUs, and the preemptions, scheduled takes and reclaim waves it will see."""
    for i, pool in enumerate(sim.sc.pools):
        for _ in range(pool.gpus):
            join(sim, i)
        if pool.purchase == "preemptible" and pool.preemptions_per_gpu_hour > 0:
            next_preemption(sim, i)
        for scheduled in pool.preemptions:
            sim.at(scheduled.at_seconds, SCHEDULED, i, scheduled)
        for wave in pool.reclaims:
            count = round(pool.gpus * wave.share)
            if count <= 0:
                continue
            step = wave.over_seconds / count
            for n in range(count):
                sim.at(wave.at_seconds + n * step, RECLAIM, i, None)
            if wave.restore_after_seconds is not None:
                sim.at(wave.at_seconds + wave.over_seconds + wave.restore_after_seconds, RESTORE, i, count)


def join(sim: Simulation, pool_index: int) -> Gpu:
    """A new GPU of the pool starts polling its queue."""
    pool = sim.sc.pools[pool_index]
    sim.gpu_ids += 1
    gpu = Gpu(sim.gpu_ids, pool_index, queue_name(pool.gpu_class, pool.region), sim.now)
    members = sim.pool_gpus[pool_index]
    gpu.slot = len(members)
    members.append(gpu)
    queue = sim.queues[gpu.queue]
    queue.alive += 1
    queue.idle[gpu.id] = gpu
    return gpu


def next_preemption(sim: Simulation, pool_index: int) -> None:
    """Schedule the pool's next random preemption (Poisson per GPU-hour)."""
    pool = sim.sc.pools[pool_index]
    alive = len(sim.pool_gpus[pool_index])
    if alive == 0:
        sim.at(sim.now + IDLE_POOL_RECHECK_SECONDS, PREEMPT, pool_index, None)
        return
    rate = pool.preemptions_per_gpu_hour * alive / 3600.0
    sim.at(sim.now + sim.rng.expovariate(rate), PREEMPT, pool_index, None)


def scheduled_preemption(sim: Simulation, pool_index: int, scheduled: ScheduledPreemption) -> None:
    """A preemption the scenario names the time of (replaced or not)."""
    if not scheduled.replaced:
        sim.pool_target[pool_index] -= 1
    preempt_random(sim, pool_index, replace=scheduled.replaced, warned=scheduled.warned)


def reclaim(sim: Simulation, pool_index: int) -> None:
    """One GPU of a reclaim wave leaves for good (until a restore)."""
    sim.pool_target[pool_index] -= 1
    preempt_random(sim, pool_index, replace=False)


def restore(sim: Simulation, pool_index: int, count: int) -> None:
    """A reclaim wave's GPUs come back, each after the pool's replacement time."""
    sim.pool_target[pool_index] += count
    for _ in range(count):
        sim.at(sim.now + sim.sc.pools[pool_index].replace_seconds, JOIN, pool_index, None)


def preempt_random(sim: Simulation, pool_index: int, replace: bool, warned: bool | None = None) -> None:
    """The cloud takes one GPU of the pool back (a notice, or a kill without one)."""
    members = sim.pool_gpus[pool_index]
    if not members:
        return
    # A busy GPU if there is one when the time is scheduled (a calibration kills a worker
    # that is generating); at random otherwise.
    busy = [g for g in members if g.job is not None] if warned is not None else []
    gpu = (busy or members)[sim.rng.randrange(len(busy or members))]
    pool = sim.sc.pools[pool_index]
    if warned is None:
        warned = sim.rng.random() < pool.warned_share
    warned = warned and pool.warning_seconds >= sim.sc.checkpoint_write_seconds
    take_back(sim, gpu, pool, warned)
    if replace:
        sim.at(sim.now + pool.replace_seconds, JOIN, pool_index, None)


def take_back(sim: Simulation, gpu: Gpu, pool: Pool, warned: bool) -> None:
    """``gpu`` leaves its pool and queue; the attempt on it, if any, is interrupted."""
    members = sim.pool_gpus[gpu.pool]
    last = members.pop()
    if last is not gpu:
        members[gpu.slot] = last
        last.slot = gpu.slot
    gpu.leaving = True
    queue = sim.queues[gpu.queue]
    queue.alive -= 1
    queue.idle.pop(gpu.id, None)
    job = gpu.job
    if job is not None:
        interrupt(sim, job, gpu, warned)
    # Paid for until the machine is gone: the warning's length, or now.
    sim.at(sim.now + (pool.warning_seconds if warned else 0.0), GONE, gpu, None)


def gone(sim: Simulation, gpu: Gpu) -> None:
    """A GPU taken back is no longer paid for."""
    held(sim, gpu, sim.now)
    gpu.job = None


def held(sim: Simulation, gpu: Gpu, until: float) -> None:
    """Book ``gpu``'s time held in the measured window, up to ``until``."""
    sim.result.held_gpu_seconds[gpu.pool] += sim.overlap(gpu.joined, until)


def interrupt(sim: Simulation, job: SimJob, gpu: Gpu, warned: bool) -> None:
    """``gpu`` of a running ``job`` is taken back: with a notice the attempt checkpoints
    and fails at once; without one the work since the last checkpoint is lost and the
    server notices after the heartbeat timeout."""
    done, saved = sim.progress(job)
    sim.result.preemptions += 1
    if job.preemptions == 0 and job.measured:
        sim.result.jobs_preempted += 1
    job.preemptions += 1
    write = sim.sc.checkpoint_write_seconds
    others = [g for g in job.workers if g is not gpu]
    # Every member stops working for this attempt now; the others poll again once they
    # learn it (``RELEASE``), and a second notice to one of them interrupts nothing.
    for member in job.workers:
        member.job = None
    if warned:
        # The notice's checkpoint saves everything done; its write is the cost.
        lost = 0.0
        sim.account(job, sim.now + write, done, 0.0)
        job.done += done
        retry_at = sim.now + write
        release_at = sim.now + write
    else:
        lost = done - saved
        sim.account(job, sim.now, saved, lost)
        job.done += saved
        # The attempt times out after the heartbeat timeout; a gang's other members learn
        # it then (their time meanwhile is overhead).
        timeout = sim.settings.video_heartbeat_timeout_seconds
        retry_at = sim.now + timeout
        release_at = sim.now + timeout
        idling = len(others) * sim.overlap(sim.now, release_at)
        sim.result.overhead_gpu_seconds += idling
        sim.result.busy_gpu_seconds += idling
    sim.result.lost_per_preemption.append(lost)
    sim.record_attempt(job, "preempted" if warned else "killed", lost)
    sim.queues[job.queue].running.discard(job)
    job.token += 1  # its pending finish is stale now
    job.workers = []
    if others:
        sim.at(release_at, RELEASE, others, None)
    if job.attempts >= VIDEO_GENERATE_RETRY.maximum_attempts > 0:
        sim.close(job, "failed")
        return
    sim.at(retry_at + retry_delay(job.attempts), RETRY, job, None)
