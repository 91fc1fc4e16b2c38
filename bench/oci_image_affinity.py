"""Image affinity: a burst of ``container:`` jobs over 3 images on 2 OCI workers, routed by image
(affinity) and by labels only (the baseline), in one run: cache hit rate and time to first
step side by side.

    python -m bench.oci_image_affinity               # 3 bursts of 18 jobs per mode
    python -m bench.oci_image_affinity --jobs 30 --rounds 5

Real: the dev server; one ``CIRunWorkflow`` per job, as a push makes (its probe of the image
queue, its try there and its fallback to the labels' queue); each worker's label-queue worker
and ``ImageQueues`` on one budget of ``SLOTS`` job slots (``SharedSlots``); each worker's
``OciSandbox`` with a podman store of its own (``ci_oci_storage``) that keeps the helper image
and 2 job images (least recently used evicted, as ``ImageCache`` does), pulling from a
loopback ``docker-registry``. The job's work is the backend's path of a job: ``begin_job`` (pin,
pull unless held), its first step in its container, then one second of work. Both modes start
from the same warm state (worker A holds images 0 and 1, worker B images 1 and 2) and see the
same burst (job i uses image i mod 3, one push every ``--gap`` seconds). A hit is a job whose
image its worker already held; time to first step runs from the job's queueing (the run's
state) to its first step's start. Each image is the helper image plus a 40 MB layer of its
own (built here with ``podman build``, no download). Figures, never assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from activities.ci.jobroot import JobRoot
from activities.ci.probe import CIProbeActivities
from activities.ci.sandbox import SandboxLimits, SandboxRequest
from bench.report import Table
from testing.ci_runs import attempt_grant, run_input, succeeded
from testing.oci_images import BASE, podman_image
from testing.oci_registry import copy_once, push, running_registry
from testing.temporal import start_local_environment
from worker_ci.cgroups import CgroupLimiter, CgroupUnavailable
from worker_ci.image_queues import ImageQueues
from worker_ci.images import RegistryDigests
from worker_ci.job_slots import SharedSlots, job_workers
from worker_ci.job_users import JobUserPool
from worker_ci.oci_podman import Registry
from worker_ci.oci_sandbox import OciSandbox
from workflows.ci.ids import run_workflow_id
from workflows.ci.run import CIRunWorkflow
from workflows.ci.types.job import (
    ACTIVITY_RUN_JOB,
    JobActivityInput,
    JobResult,
)
from workflows.ci.types.projection import ACTIVITY_PROJECT_RUN, CIRunSnapshot
from workflows.ci.types.run import CIRunState
from workflows.ci.types.spec import ContainerSpec, JobSpec, StepSpec
from workflows.queues import ci_label_subsets, ci_probe_queue, ci_queue, orchestration_queue

LABEL = "bench"
IMAGES = 3
LAYER_BYTES = 40 << 20
AFFINITY_SECONDS = 3.0
# Job slots per worker: with affinity the label queue's idle poll holds 1, image queues take
# jobs into the rest.
SLOTS = 3
LIMITS = SandboxLimits(memory_bytes=512 << 20, max_processes=256, max_file_bytes=1 << 30, cpu_seconds=600)
# Which images each worker holds when a burst begins.
WARM = ((0, 1), (1, 2))


def _images(host: str) -> list[str]:
    """The bench's images in the registry (built once: the helper plus a 40 MB layer each)."""
    return [copy_once(host, f"leasehold/bench-affinity-{i}:1", partial(_build, i)) for i in range(IMAGES)]


def _build(i: int) -> str:
    """Image ``i`` in podman's local storage, built from the helper image; its tag."""
    tag = f"localhost/bench-affinity-{i}:1"
    with tempfile.TemporaryDirectory() as ctx:
        (Path(ctx) / "blob").write_bytes(random.Random(i).randbytes(LAYER_BYTES))
        (Path(ctx) / "Containerfile").write_text(f"FROM {podman_image(BASE)}\nCOPY blob /blob-{i}\n")
        subprocess.run(["podman", "build", "--quiet", "--network", "none", "-t", tag, ctx], check=True)
    return tag


@dataclass
class Seen:
    """What one job's worker saw: when its first step started, whether its image was held."""

    worker: str
    first_step: float
    hit: bool
    queue: str


@dataclass
class BenchWorker:
    """One OCI worker: its backend (own podman store), its job slot and its queues."""

    name: str
    backend: OciSandbox
    work: Path
    client: Client
    loop: asyncio.AbstractEventLoop
    seen: dict[str, Seen]
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run_job(self, inp: JobActivityInput) -> JobResult:
        info = activity.info()
        started = datetime.now(UTC)
        grant = attempt_grant(self.client, self.loop, inp, self.name)
        said: list[str] = []
        first_step = self.job(inp.job, said.append)
        with self.lock:
            hit = any("job's container" in line and "cached on this worker" in line for line in said)
            self.seen[inp.run_workflow_id] = Seen(self.name, first_step, hit, info.task_queue)
        return succeeded(inp, grant, started, self.name)

    def job(self, spec: JobSpec, say: Callable[[str], None]) -> float:
        """The backend's path of the job: its container (pulled unless held), its first step
        (a second of work); the first step's start time."""
        root = self.work / uuid.uuid4().hex
        self.backend.prepare(root)
        try:
            self.backend.begin_job(root, spec, say)
            first_step = time.time()
            proc = self.backend.start(
                SandboxRequest(argv=["sleep", "1"], env={}, root=root, cwd="/ci/work", limits=LIMITS)
            )
            proc.stdout.read()
            proc.wait(120)
            proc.finish()
            return first_step
        finally:
            self.backend.end_job(root, lambda _: None)
            JobRoot(root, self.backend, LIMITS).remove()
            self.backend.release(root)


def _job(name: str, image: str, digest: str) -> JobSpec:
    return JobSpec(
        id=name,
        name=name,
        runs_on=[LABEL],
        container=ContainerSpec(image=image, digest=digest),
        steps=[StepSpec(index=0, name="s", run="true")],
    )


@contextlib.contextmanager
def _backends(tmp: Path, host: str, helper: str) -> Iterator[list[OciSandbox]]:
    cgroups: CgroupLimiter | None
    try:
        cgroups = CgroupLimiter.detect()
    except CgroupUnavailable:
        cgroups = None
    backends = []
    for n in range(2):
        users = JobUserPool(tmp / f"uids-{n}", 1_980_000 + 100 * n, 16)
        backends.append(
            OciSandbox(
                users,
                Registry(host, False),
                helper,
                tmp / f"oci-{n}",
                cgroups,
                cache_images=3,
                storage=tmp / f"store-{n}",
            )
        )
    try:
        yield backends
    finally:
        for n in range(2):
            store = tmp / f"store-{n}"
            storage = ["--root", str(store / "root"), "--runroot", str(store / "run")]
            subprocess.run(["podman", *storage, "system", "reset", "--force"], capture_output=True)


async def _burst(
    client: Client, host: str, helper: str, images: list[str], jobs: int, gap: float, affinity: bool
) -> list[float | bool]:
    """One mode: two fresh workers warmed as ``WARM`` says, then the burst; per job, flat: its
    cache hit, its time to first step, whether an image queue handed it over."""
    digests = {path: RegistryDigests(host, tls_verify=False)(path) for path in images}
    prefix = f"affinity-bench-{uuid.uuid4().hex[:6]}-"
    loop = asyncio.get_running_loop()
    seen: dict[str, Seen] = {}
    with tempfile.TemporaryDirectory() as tmp_name, _backends(Path(tmp_name), host, helper) as backends:
        tmp = Path(tmp_name)
        workers = []
        for n, backend in enumerate(backends):
            # A connection of its own, as a worker process has (one process may not poll a queue
            # twice on one connection).
            own = await Client.connect(
                client.service_client.config.target_host,
                namespace=client.namespace,
                data_converter=client.data_converter,
            )
            worker = BenchWorker(f"w{n}", backend, tmp / f"ws-{n}", own, loop, seen)
            worker.work.mkdir()
            for i in WARM[n]:
                await asyncio.to_thread(worker.job, _job("warm", images[i], str(digests[images[i]])), lambda _: None)
            workers.append(worker)
        async with contextlib.AsyncExitStack() as running:
            image_queues = await _serve(running, client, prefix, workers, affinity)
            await asyncio.sleep(3.0)  # the image queues of what each worker holds are polled
            queued = await _push_burst(client, prefix, images, digests, jobs, gap, affinity)
            for task in image_queues:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    results: list[float | bool] = []
    for run_wf_id, state in queued.items():
        found = state.job("build")
        assert found is not None and found.queued_at is not None, state
        s = seen[run_wf_id]
        results += [s.hit, s.first_step - found.queued_at.timestamp(), "#" in s.queue]
    return results


async def _serve(
    running: contextlib.AsyncExitStack, client: Client, prefix: str, workers: list[BenchWorker], affinity: bool
) -> list[asyncio.Task[None]]:
    """The orchestration and probe workers, and each bench worker's label queue (and, with
    ``affinity``, its image queues: the tasks that keep them in line, returned)."""
    orchestration = Worker(
        client, task_queue=orchestration_queue(prefix), workflows=[CIRunWorkflow], activities=[_project_ci_run]
    )
    await running.enter_async_context(orchestration)
    probe = Worker(client, task_queue=ci_probe_queue(prefix), activities=[CIProbeActivities(client).served_queues])
    await running.enter_async_context(probe)
    image_queues = []
    for worker in workers:
        slots = SharedSlots(SLOTS, idle_per_queue=1 if affinity else None)
        run_job = activity.defn(name=ACTIVITY_RUN_JOB)(_bound(worker))
        label_queues = [ci_queue([LABEL], prefix)]
        executor = ThreadPoolExecutor(max_workers=SLOTS)
        for w in job_workers(worker.client, label_queues, [run_job], slots, executor, None, 1 if affinity else None):
            await running.enter_async_context(w)
        if affinity:
            queues = ImageQueues(
                worker.client, ci_label_subsets([LABEL]), prefix, "bubblewrap", worker.backend.affinity_digests, 2,
                _bound(worker), slots, ThreadPoolExecutor(max_workers=2), None,
            )  # fmt: skip
            image_queues.append(asyncio.create_task(queues.run()))
    return image_queues


async def _push_burst(
    client: Client,
    prefix: str,
    images: list[str],
    digests: dict[str, str | None],
    jobs: int,
    gap: float,
    affinity: bool,
) -> dict[str, CIRunState]:
    """One run per job (job i uses image i mod 3), one every ``gap`` seconds; their end states."""
    handles = []
    for i in range(jobs):
        image = images[i % IMAGES]
        inp = run_input(
            prefix,
            [_job("build", image, str(digests[image]))],
            heartbeat_timeout_seconds=60.0,
            image_affinity_seconds=AFFINITY_SECONDS if affinity else 0.0,
        )
        queue = orchestration_queue(prefix)
        handles.append(
            await client.start_workflow(CIRunWorkflow.run, inp, id=run_workflow_id(inp.run_id), task_queue=queue)
        )
        await asyncio.sleep(gap)
    return {handle.id: await asyncio.wait_for(handle.result(), 600) for handle in handles}


def _bound(worker: BenchWorker):  # type: ignore[no-untyped-def]
    def run_job(inp: JobActivityInput) -> JobResult:
        return worker.run_job(inp)

    return run_job


@activity.defn(name=ACTIVITY_PROJECT_RUN)
async def _project_ci_run(inp: CIRunSnapshot) -> bool:
    return True


async def _measure(jobs: int, gap: float, rounds: int) -> Table:
    table = Table(
        f"OCI image affinity: {jobs} container jobs over {IMAGES} images on 2 workers ({SLOTS} slots each),"
        f" {rounds} round(s) per mode",
        ["routing", "via image queue", "cache hits", "time to first step p50 s", "p90 s", "mean s"],
    )
    seen: dict[bool, list[float | bool]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp, running_registry(Path(tmp)) as host:
        helper = push(host, BASE)
        images = _images(host)
        async with await start_local_environment() as env:
            # Alternating, so that both modes see the host as it is through the run.
            for _ in range(rounds):
                for affinity in (True, False):
                    seen[affinity] += await _burst(env.client, host, helper, images, jobs, gap, affinity)
    for affinity, flat in seen.items():
        hits = [bool(h) for h in flat[0::3]]
        ttfs = sorted(float(t) for t in flat[1::3])
        via_image = sum(bool(v) for v in flat[2::3])
        label = f"image queue first ({AFFINITY_SECONDS:g} s), then labels" if affinity else "labels only (baseline)"
        table.rows.append(
            [
                label,
                f"{via_image}/{len(hits)}",
                f"{sum(hits)}/{len(hits)} ({100 * sum(hits) / len(hits):.0f} %)",
                f"{statistics.median(ttfs):.2f}",
                f"{ttfs[int(0.9 * (len(ttfs) - 1))]:.2f}",
                f"{statistics.fmean(ttfs):.2f}",
            ]
        )
    table.notes.append(
        f"one push every {gap:g} s; each job: its container, then `sleep 1`; a worker keeps the helper and 2 job"
        f" images; each image adds a {LAYER_BYTES >> 20} MB layer to the helper's; runc, {os.cpu_count()} CPUs"
    )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.oci_image_affinity", description=__doc__)
    parser.add_argument("--jobs", type=int, default=18)
    parser.add_argument("--gap", type=float, default=0.5, help="seconds between two pushes")
    parser.add_argument("--rounds", type=int, default=3, help="bursts per mode, alternating")
    args = parser.parse_args()
    print(asyncio.run(_measure(args.jobs, args.gap, args.rounds)).text())


if __name__ == "__main__":
    main()
