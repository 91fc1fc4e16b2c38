"""The ETA's replay of Temporal's fairness rule (pure computation, no server).

The server gives a task that waits the pass ``max(ack level, its key's last pass + 1/weight)``
and hands waiting tasks out in pass order (ties: the earlier task); a task matched at once to
a polling worker takes no pass. A key that fell behind is therefore served next.
``FairnessShadow`` replays that from arrivals and starts.
"""

from __future__ import annotations

from video_policy.eta import JobCosts, JobShape, ModelSnapshot, QueuedJob, RunningJob
from video_policy.queue_plan import FairnessShadow, plan
from workflows.video.models import get_model

SHAPE = JobShape(steps=10, frames=8, width=180, height=320)


def _queued(job_id: str, key: str, weight: float, at: float) -> QueuedJob:
    tier = key.split("/")[0]
    return QueuedJob(job_id, "t", key, tier, at, SHAPE, key, weight)


def _costs() -> JobCosts:
    spec = get_model("procedural-v1")
    assert spec is not None
    costs = JobCosts(spec)
    costs.observe_step(SHAPE, 1.0)  # 10 s a job
    costs.observe_job(10.0, 10.0)
    return costs


def test_shadow_replays_passes_acks_and_direct_matches() -> None:
    shadow = FairnessShadow()
    # t=0: a job finds a worker polling (started 0.1 s later): matched at once, no pass.
    # t=1: a free job waits (weight 1); t=2: a paid user submits three (weight 4).
    arrivals = [("d", 0.0, "paid/p", 4.0), ("f", 1.0, "free/f", 1.0)]
    arrivals += [(f"p{i}", 2.0, "paid/p", 4.0) for i in range(3)]
    shadow.update(arrivals, [("d", 0.1)], {"d", "f", "p0", "p1", "p2"}, now=3.0)
    assert shadow.passes == {"f": 1.0, "p0": 0.25, "p1": 0.5, "p2": 0.75}
    assert shadow.ack == 0.0
    # p0 and p1 start (in pass order); d has closed.
    shadow.update(arrivals[1:], [("p0", 10.0), ("p1", 20.0)], {"f", "p0", "p1", "p2"}, now=21.0)
    assert shadow.ack == 0.5
    assert shadow.passes == {"f": 1.0, "p2": 0.75}
    # A new free user gets its increment over its (empty) history, 1.0; a paid user whose
    # history fell behind the ack level gets the ack level itself: next in line. p1 closed.
    more = [*arrivals[1:], ("g", 22.0, "free/g", 1.0), ("q", 22.5, "paid/q", 4.0)]
    shadow.update(more, [("p0", 10.0)], {"f", "p0", "p2", "g", "q"}, now=23.0)
    assert shadow.passes["g"] == 1.0
    assert shadow.passes["q"] == 0.5
    # A job that vanished between refreshes without being seen running was handed out.
    shadow.update(more, [], {"f", "g", "q"}, now=30.0)
    assert "p2" not in shadow.passes and shadow.ack == 0.75


def test_plan_places_a_long_waiting_job_by_the_pass_it_was_given() -> None:
    """A free job waiting since before a paid burst is next once the paid jobs with lower passes
    are out; numbering the waiting jobs' passes from zero would put it behind the burst."""
    costs = _costs()
    free = _queued("f", "free/f", 1.0, at=1.0)
    paid = [_queued(f"p{i}", "paid/p", 4.0, at=2.0 + i * 0.01) for i in range(8)]
    shadow = FairnessShadow()
    arrivals = [(j.job_id, j.created_at, j.fairness_key, j.fairness_weight) for j in [free, *paid]]
    ids = {j.job_id for j in [free, *paid]}
    shadow.update(arrivals, [], ids, now=3.0)
    # Three paid jobs were handed out (passes 0.25, 0.5, 0.75); one runs now.
    starts = [("p0", 10.0), ("p1", 20.0), ("p2", 30.0)]
    shadow.update(arrivals, starts, ids - {"p0", "p1"}, now=35.0)
    running = [RunningJob("p2", "t", "paid/p", "paid", SHAPE, step=5, worker="w1", alive=True)]
    snapshot = ModelSnapshot(
        model="procedural-v1", taken_at=35.0, queued=[free, *paid[3:]], running=running, workers_serving=1
    )

    replayed = plan(snapshot, costs, shadow=shadow)
    from_zero = plan(snapshot, costs)
    assert replayed is not None and from_zero is not None
    # The server's order: f (pass 1.0, earlier than p3's 1.0), then p3..p7.
    assert replayed.starts["f"][0] == 1
    assert replayed.starts["p3"][0] == 2
    assert replayed.starts["f"][1] < replayed.starts["p3"][1]
    # Passes from zero (f at 1.0 against p3..p7 at 0.25..1.25) would tell it to wait for three.
    assert from_zero.starts["f"][0] == 4


def test_a_job_of_a_user_with_nothing_waiting_goes_before_due_jobs() -> None:
    """A paid user with nothing waiting gets the ack level itself: it goes before a free job
    that is due (pass 1.0 against the ack level 0.75), as the server does; the rule
    ``max(last, ack) + 1/weight`` would give it 1.0 and put it second."""
    costs = _costs()
    free = _queued("f", "free/f", 1.0, at=1.0)
    paid = [_queued(f"p{i}", "paid/p", 4.0, at=2.0) for i in range(3)]
    shadow = FairnessShadow()
    arrivals = [(j.job_id, j.created_at, j.fairness_key, j.fairness_weight) for j in [free, *paid]]
    shadow.update(arrivals, [("p0", 10.0), ("p1", 20.0), ("p2", 30.0)], {"f", "p2"}, now=31.0)
    assert shadow.ack == 0.75
    running = [RunningJob("p2", "t", "paid/p", "paid", SHAPE, step=5, worker="w1", alive=True)]
    snapshot = ModelSnapshot(model="procedural-v1", taken_at=31.0, queued=[free], running=running, workers_serving=1)
    late = _queued("q", "paid/q", 4.0, at=32.0)
    planned = plan(snapshot, costs, extra=[late], shadow=shadow)
    assert planned is not None
    assert planned.starts["q"][0] == 1
    assert planned.starts["f"][0] == 2


def test_a_key_just_behind_the_ack_level_keeps_its_turn() -> None:
    """A free user whose last job was handed out at pass 2.0, the ack level now 2.5: its next
    job gets 2.0 + 2 = 4.0 (weight 1/2), not the ack level: the server remembers the key."""
    shadow = FairnessShadow()
    arrivals = [("f1", 1.0, "free/f", 0.5), ("p1", 1.5, "paid/p", 2.0), ("p2", 1.6, "paid/p", 2.0)]
    shadow.update(arrivals, [], {"f1", "p1", "p2"}, now=2.0)
    assert shadow.passes == {"f1": 2.0, "p1": 0.5, "p2": 1.0}
    # Three more paid jobs (1.5, 2.0, 2.5); all are handed out in pass order, f1 among them.
    more = [*arrivals, ("p3", 3.0, "paid/p", 2.0), ("p4", 3.1, "paid/p", 2.0), ("p5", 3.2, "paid/p", 2.0)]
    starts = [("p1", 5.0), ("p2", 6.0), ("p3", 6.5), ("f1", 7.0), ("p4", 7.5), ("p5", 8.0)]
    shadow.update(more, starts, set(), now=9.0)
    assert shadow.ack == 2.5 and shadow.passes == {}
    shadow.update([("f2", 10.0, "free/f", 0.5)], [], {"f2"}, now=11.0)
    assert shadow.passes["f2"] == 4.0
