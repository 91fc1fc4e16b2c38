"""A reclaim of preemptible workers moves free jobs' ETAs first: the queue plan the ETA comes
from counts every worker of the pool (both capacity types) for every job, in the order the
server dispatches them, so losing workers delays the jobs dispatched last, the free ones."""

from __future__ import annotations

from leasehold.settings import Settings
from video_policy.eta import JobCosts, JobShape, ModelSnapshot, QueuedJob
from video_policy.queue_plan import plan
from workflows.video.models import get_model

SHAPE = JobShape(steps=20, frames=24, width=320, height=180)


def starts(workers: dict[str, int]) -> dict[str, float]:
    """Mean expected start of each tier's waiting jobs with ``workers`` by capacity type."""
    spec = get_model("procedural-v1")
    assert spec is not None
    settings = Settings()
    weights = {"paid": settings.video_paid_weight, "free": settings.video_free_weight}
    queued = [
        QueuedJob(f"{tier}-{n}", "t", f"{tier}-user-{n}", tier, float(n), SHAPE, f"{tier}-user-{n}", weights[tier])
        for n in range(6)
        for tier in ("paid", "free")
    ]
    snapshot = ModelSnapshot(
        model="procedural-v1",
        taken_at=100.0,
        queued=queued,
        workers_serving=sum(workers.values()),
        workers_polling=sum(workers.values()),
        workers_by_capacity=workers,
        measured=True,
    )
    planned = plan(snapshot, JobCosts(spec))
    assert planned is not None
    return {tier: sum(planned.starts[j.job_id][1] for j in queued if j.tier == tier) / 6 for tier in ("paid", "free")}


def test_a_reclaim_of_preemptible_workers_moves_free_etas_first() -> None:
    before = starts({"reserved": 2, "preemptible": 4})
    after = starts({"reserved": 2, "preemptible": 0})
    assert after["paid"] >= before["paid"] and after["free"] > before["free"]
    assert after["free"] - before["free"] > after["paid"] - before["paid"] > -1e-9
