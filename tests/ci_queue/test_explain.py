"""The queue explanation's rules on a run's state and the engine's answers (concurrency groups,
matrix max-parallel, an engine that does not answer), its cache, and its settings. The answers
of a real engine are the end-to-end tests' (test_queue_e2e.py)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from temporalio.client import Client

from api.ci.queue_explanation import UNAVAILABLE, Facts, QueueExplainer, TtlCache, explain_job
from leasehold.devserver import free_port
from leasehold.settings import Settings
from workflows.ci.ids import run_workflow_id
from workflows.ci.types.concurrency import GroupRequest, GroupState
from workflows.ci.types.run import CIRunState, JobState, JobStatus, RunStatus
from workflows.ci.types.semaphore import SemaphoreState, SlotRequest

NOW = datetime(2026, 12, 1, tzinfo=UTC)
RUN = "run_" + "a" * 24
OTHER = "run_" + "b" * 24


def run_of(*jobs: JobState, status: RunStatus = RunStatus.IN_PROGRESS, group: str | None = None) -> CIRunState:
    return CIRunState(
        run_id=RUN,
        tenant_id="t1",
        repo_id="r1",
        commit_sha="0" * 40,
        ref="refs/heads/main",
        workflow_path=".github/workflows/ci.yml",
        status=status,
        created_at=NOW,
        jobs=list(jobs),
        concurrency_group=group,
    )


def reasons(out: object) -> list[str]:
    return [w.reason.value for w in out.waiting_for]  # type: ignore[attr-defined]


def test_job_in_a_concurrency_group_behind_another_run_then_the_full_cap() -> None:
    deploy = JobState(job_id="deploy", name="deploy", runs_on=["linux"], status=JobStatus.QUEUED)
    deploy.concurrency_group = "prod"
    state = run_of(deploy)
    facts = Facts(
        semaphore=SemaphoreState(
            tenant_id="t1", limit=2, holders=[SlotRequest(holder="ci-run:x", key=f"j{i}#0", limit=2) for i in range(2)]
        ),
        groups={
            "prod": GroupState(
                tenant_id="t1",
                group="prod",
                running=GroupRequest(holder=run_workflow_id(OTHER), key="deploy#0"),
                pending=GroupRequest(holder=run_workflow_id(RUN), key="deploy#0"),
            )
        },
        served={("linux",): True},
        candidates=[("linux",)],
    )
    out = explain_job(state, deploy, facts, NOW)
    assert reasons(out) == ["concurrency_group", "tenant_cap"]
    assert out.message == f"this job waits in concurrency group 'prod': {OTHER} (job deploy) is running in it"
    assert out.position is None and (out.slots_in_use, out.slot_limit) == (2, 2)
    assert out.concurrency_group == "prod"

    # Its request to the group not seen by the group yet: in flight, to the group.
    facts.groups["prod"] = GroupState(
        tenant_id="t1", group="prod", running=GroupRequest(holder=run_workflow_id(OTHER), key="deploy#0")
    )
    out = explain_job(state, deploy, facts, NOW)
    assert reasons(out) == ["starting"] and out.message.startswith("asking for its place in concurrency group 'prod'")
    # Let in by its group, its slot request not seen by the semaphore yet: in flight, for a slot.
    facts.groups["prod"] = GroupState(
        tenant_id="t1", group="prod", running=GroupRequest(holder=run_workflow_id(RUN), key="deploy#0")
    )
    out = explain_job(state, deploy, facts, NOW)
    assert reasons(out) == ["starting"] and out.message == "asking for a slot (2 of 2 slots of your tenant in use)"
    # Holding a slot, only a worker is left.
    assert isinstance(facts.semaphore, SemaphoreState)
    facts.semaphore.holders[1] = SlotRequest(holder=run_workflow_id(RUN), key="deploy#0", limit=2)
    assert reasons(explain_job(state, deploy, facts, NOW)) == ["worker"]


def test_jobs_in_their_runs_own_slot_queue_and_a_slot_handed_over() -> None:
    """The run asked for as many slots as the cap leaves it: its other jobs wait in its own
    queue, in order; a job running on a slot handed over names the slot's key."""
    held = [SlotRequest(holder=run_workflow_id(RUN), key=f"j{i}#0", limit=2) for i in range(2)]
    jobs = [
        JobState(job_id=f"j{i}", name=f"j{i}", runs_on=["linux"], status=JobStatus.QUEUED, queued_at=NOW)
        for i in range(4)
    ]
    jobs[2].run_slot_wait = jobs[3].run_slot_wait = True
    state = run_of(*jobs)
    facts = Facts(
        semaphore=SemaphoreState(tenant_id="t1", limit=2, holders=held),
        served={("linux",): True},
        candidates=[("linux",)],
    )
    first, second = (explain_job(state, j, facts, NOW) for j in jobs[2:])
    assert reasons(first) == reasons(second) == ["tenant_cap"]
    assert (first.position, first.ahead, second.position, second.ahead) == (1, 0, 2, 1)
    assert first.message == (
        "waiting for a slot of your tenant's cap (2 of 2 slots in use): the next one its run gives back; next in line"
    )
    assert second.message.endswith("; 1 of your jobs ahead of it")
    assert (second.slots_in_use, second.slot_limit) == (2, 2)
    # j0 ended; j2 runs on its slot, still counted under the key the semaphore granted.
    jobs[2].run_slot_wait = False
    jobs[2].slot_key = "j0#0"
    jobs[0].status = JobStatus.SUCCESS
    assert reasons(explain_job(state, jobs[2], facts, NOW)) == ["worker"]
    assert explain_job(state, jobs[3], facts, NOW).position == 1
    # Without the key it would read as a job whose request is in flight.
    jobs[2].slot_key = None
    assert reasons(explain_job(state, jobs[2], facts, NOW)) == ["starting"]
    # The run still waits in the tenant's queue for a slot it asked for: that request, and
    # the one of another run ahead of it, come first.
    facts.semaphore.pending = [  # type: ignore[union-attr]
        SlotRequest(holder=run_workflow_id(OTHER), key="x#0", limit=2),
        SlotRequest(holder=run_workflow_id(RUN), key="j1#0", limit=2),
    ]
    out = explain_job(state, jobs[3], facts, NOW)
    assert (out.position, out.ahead) == (3, 2) and out.message.endswith("; 2 of your jobs ahead of it")


def test_a_job_behind_another_run_holding_the_cap_is_told_that_run_keeps_its_slots() -> None:
    job = JobState(job_id="build", name="build", runs_on=["linux"], status=JobStatus.QUEUED, queued_at=NOW)
    state = run_of(job)
    facts = Facts(
        semaphore=SemaphoreState(
            tenant_id="t1",
            limit=2,
            holders=[SlotRequest(holder=run_workflow_id(OTHER), key=f"j{i}#0", limit=2) for i in range(2)],
            pending=[SlotRequest(holder=run_workflow_id(RUN), key="build#0", limit=2)],
        ),
        served={("linux",): True},
        candidates=[("linux",)],
    )
    out = explain_job(state, job, facts, NOW)
    assert reasons(out) == ["tenant_cap"] and (out.position, out.ahead) == (1, 0)
    assert out.message == (
        "waiting for a slot of your tenant's cap (2 of 2 slots in use); next in line; "
        "another run holds slots and keeps them for its own queued jobs first"
    )


def test_run_waiting_for_its_workflow_level_group() -> None:
    build = JobState(job_id="build", name="build", runs_on=["linux"])
    test = JobState(job_id="test", name="test", runs_on=["linux"], needs=["build"])
    state = run_of(build, test, status=RunStatus.QUEUED, group="main")
    facts = Facts(groups={"main": GroupState(tenant_id="t1", group="main")}, served={("linux",): True})
    assert reasons(explain_job(state, build, facts, NOW)) == ["concurrency_group"]
    assert reasons(explain_job(state, test, facts, NOW)) == ["concurrency_group", "needs"]
    assert explain_job(state, test, facts, NOW).message == "the run waits for its place in concurrency group 'main'"


def test_matrix_combination_held_by_max_parallel_and_many_needs() -> None:
    parent = JobState(job_id="m", name="m", status=JobStatus.IN_PROGRESS)
    child = JobState(job_id="m-2", name="m (2)", runs_on=["${{ matrix.os }}"], matrix_of="m")
    needs = [JobState(job_id=f"n{i}", name=f"n{i}", status=JobStatus.IN_PROGRESS) for i in range(7)]
    late = JobState(job_id="late", name="late", needs=[n.job_id for n in needs], runs_on=["linux"])
    state = run_of(parent, child, *needs, late)
    out = explain_job(state, child, Facts(), NOW)
    # Its labels come from an expression: not known before it is queued, so not judged.
    assert reasons(out) == ["max_parallel"] and out.labels_served is None
    many = explain_job(state, late, Facts(served={("linux",): True}), NOW)
    assert many.needs == [n.job_id for n in needs]
    assert many.message.endswith("and 2 more") and many.message.count("(in_progress)") == 5


def test_engine_silent_queued_job_says_unknown() -> None:
    queued = JobState(job_id="a", name="a", runs_on=["linux"], status=JobStatus.QUEUED)
    out = explain_job(run_of(queued), queued, Facts(semaphore=UNAVAILABLE), NOW)
    assert reasons(out) == ["unknown"] and out.labels_served is None and out.slots_in_use is None


async def test_unreachable_engine_explains_without_failing(tmp_path: Path) -> None:
    # A real client whose server is not there: every read fails and the page still answers.
    settings = Settings(data_dir=tmp_path, temporal_address=f"127.0.0.1:{free_port()}")
    client = await Client.connect(settings.temporal_address, lazy=True)
    explainer = QueueExplainer(client, settings)
    queued = JobState(job_id="a", name="a", runs_on=["linux"], status=JobStatus.QUEUED)
    waiting = JobState(job_id="b", name="b", runs_on=["linux"], needs=["a"])
    done = JobState(job_id="c", name="c", runs_on=["linux"], status=JobStatus.SUCCESS)
    out = await asyncio.wait_for(explainer.explain(run_of(queued, waiting, done)), timeout=30)
    assert set(out) == {"a", "b"}
    assert out["a"].reason == "unknown" and out["b"].reason == "needs"
    # A finished run explains nothing (and reads nothing).
    assert await explainer.explain(run_of(queued, status=RunStatus.CANCELLED)) == {}


async def test_cache_shares_one_load_and_expires() -> None:
    loads = 0
    gate = asyncio.Event()

    async def load() -> int:
        nonlocal loads
        loads += 1
        await gate.wait()
        return loads

    cache = TtlCache(ttl=0.2, max_entries=2)
    waiting = [asyncio.ensure_future(cache.get("k", load)) for _ in range(5)]
    await asyncio.sleep(0.01)
    gate.set()
    assert await asyncio.gather(*waiting) == [1] * 5 and loads == 1
    assert await cache.get("k", load) == 1
    await asyncio.sleep(0.25)
    assert await cache.get("k", load) == 2
    # Bounded: the oldest key goes first.
    await cache.get("x", load)
    await cache.get("y", load)
    assert await cache.get("k", load) == 5


def test_label_sets_setting_round_trips_through_the_environment(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(data_dir=tmp_path, ci_queue_label_sets="linux, gpu+linux")
    assert settings.ci_queue_label_sets == ["linux", "gpu+linux"]
    env = settings.to_env()
    assert env["LEASEHOLD_CI_QUEUE_LABEL_SETS"] == "linux,gpu+linux"
    monkeypatch.setenv("LEASEHOLD_CI_QUEUE_LABEL_SETS", env["LEASEHOLD_CI_QUEUE_LABEL_SETS"])
    assert Settings(data_dir=tmp_path).ci_queue_label_sets == ["linux", "gpu+linux"]
    explainer = QueueExplainer(None, Settings(data_dir=tmp_path))  # type: ignore[arg-type]
    assert explainer.deployment_sets == [("linux",), ("gpu", "linux")]
