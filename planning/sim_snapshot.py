"""What the capacity leader would measure of a simulated queue, and the wait it would tell a
new job: a ``ModelSnapshot`` with its ``FairnessShadow``, planned as the tracker plans."""

from __future__ import annotations

from collections.abc import Callable

from planning.sim_state import PLAN_STEPS, SimJob, SimQueue
from video_policy.eta import ArrivalStream, JobCosts, ModelSnapshot, QueuedJob, RunningJob
from video_policy.eta import JobShape as EtaShape
from video_policy.queue_plan import PLACE_EXACT_BELOW, FairnessShadow, QueuePlan, place, plan


def idle_snapshot(queue: SimQueue, now: float) -> ModelSnapshot:
    """A queue with a worker polling and nothing waiting: a new job is matched at once."""
    return ModelSnapshot(
        model=queue.name,
        taken_at=now,
        workers_serving=queue.alive,
        workers_polling=len(queue.idle),
        measured=True,
    )


def observe(
    queue: SimQueue,
    now: float,
    progress: Callable[[SimJob], tuple[float, float]],
    shape_of: Callable[[SimJob], EtaShape],
) -> tuple[ModelSnapshot, FairnessShadow]:
    """The snapshot of ``queue`` and the passes its waiting jobs hold; ``progress`` is the work
    a running job has done since its attempt began (and what it saved)."""
    queued: list[QueuedJob] = []
    shadow = FairnessShadow()
    shadow.ack = queue.ack
    shadow.counters = dict(queue.counters)
    for pass_, _id, job in queue.backlog:
        if not job.in_backlog:
            continue
        queued.append(
            QueuedJob(
                job_id=str(job.id),
                tenant_id="sim",
                user_id=job.user,
                tier=job.tier,
                created_at=job.arrived,
                shape=shape_of(job),
                fairness_key=job.key,
                fairness_weight=job.weight,
            )
        )
        shadow.passes[str(job.id)] = pass_
    running = []
    for job in queue.running:
        done, _saved = progress(job)
        step = int(PLAN_STEPS * min(1.0, (job.done + done) / job.work)) if job.work > 0 else PLAN_STEPS
        for member in job.workers:
            running.append(
                RunningJob(
                    job_id=f"{job.id}.{member.id}",
                    tenant_id="sim",
                    user_id=job.user,
                    tier=job.tier,
                    shape=shape_of(job),
                    step=step,
                    worker=str(member.id),
                    alive=True,
                )
            )
    snapshot = ModelSnapshot(
        model=queue.name,
        taken_at=now,
        queued=queued,
        running=running,
        workers_serving=queue.alive,
        workers_polling=len(queue.idle),
        backlog=len(queued),
        measured=True,
    )
    return snapshot, shadow


def probe_wait(
    planned: QueuePlan | None,
    snapshot: ModelSnapshot,
    shadow: FairnessShadow,
    streams: list[ArrivalStream],
    costs: JobCosts,
    shape: EtaShape,
    now: float,
    tier: str,
    weight: float,
) -> float | None:
    """The expected wait of a new job of ``tier`` from a new user (``CapacityTracker.placement``)."""
    if planned is None:
        return None
    probe = QueuedJob(
        job_id="~probe",
        tenant_id="~probe",
        user_id="~probe",
        tier=tier,
        created_at=now,
        shape=shape,
        fairness_key=f"{tier}/~probe",
        fairness_weight=weight,
    )
    if len(planned.starts) + 1 < PLACE_EXACT_BELOW:
        exact = plan(snapshot, costs, extra=[probe], arrivals=streams, shadow=shadow)
        if exact is not None and probe.job_id in exact.starts:
            return exact.starts[probe.job_id][1]
    return place(planned, probe, [], costs)[1]
