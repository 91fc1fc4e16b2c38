"""``leasehold worker ci --labels linux``: runs CI jobs in sandboxes.

One process serves the job queue of every non-empty subset of its labels (``job_slots``: a job
runs on any worker that has all its ``runs-on`` labels; at most ``MAX_CI_WORKER_LABELS``
labels, a worker with more refuses to start), the control queue (git work for pushes: every
CI worker holds mirrors) and the probe queue (which job queues are polled, asked by tenant
semaphores before they grant a slot). Job concurrency is ``Settings.ci_job_slots``
(``ci_max_concurrent_jobs``, or sized from the machine's CPUs), one budget across all the job
queues; ``/metrics`` and ``/healthz`` come from the shared health server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path

from sqlalchemy.orm import sessionmaker
from temporalio.client import Client
from temporalio.worker import Worker

from activities.ci.actions import ActionSource
from activities.ci.git import GitMirror
from activities.ci.job import CIJobActivities, JobConfig
from activities.ci.jobroot import sweep_leftover_roots
from activities.ci.listing import CIListingActivities, environment_rules
from activities.ci.probe import CIProbeActivities
from activities.ci.reconcile import CIReconcileActivities
from activities.ci.run_records import DatabaseRunRecords
from activities.ci.sandbox import Sandbox
from activities.ci.secrets import ApiSecretSource
from clients.ci.start import ensure_reconcile_schedule
from leasehold.clone_urls import ClonePolicy
from leasehold.database import init_database
from leasehold.health_server import serve_health
from leasehold.records.ci.run_numbers import assign_run_number
from leasehold.records.ci.status_reporters import has_reporter
from leasehold.records.ci.variables import environment_variables_for
from leasehold.settings import Settings
from leasehold.storage import open_store
from leasehold.temporal import connect
from leasehold.worker_versioning import deployment_config
from worker_ci.image_queues import ImageQueues
from worker_ci.images import RegistryDigests
from worker_ci.job_slots import SharedSlots, job_queues, job_workers
from worker_ci.sandbox import limits_from, make_sandbox
from workflows.queues import (
    DEFAULT_CI_ISOLATION,
    TooManyLabels,
    ci_control_queue,
    ci_label_subsets,
    ci_probe_queue,
)
from workflows.version import BUILD_ID

log = logging.getLogger(__name__)

CONTROL_CONCURRENCY = 2
# Probes of job queues (one DescribeTaskQueue each) a worker answers at once.
PROBE_CONCURRENCY = 4
# Slots one label queue's poller may hold while it waits when image queues are polled too
# (``SharedSlots.idle_per_queue``; the SDK would reserve the next poll's slot ahead, two in all).
# Image queues take jobs only into the others.
IDLE_SLOTS_PER_LABEL_QUEUE = 1
# How long a stopping worker waits for finished jobs' roots to be emptied.
REAP_DRAIN_SECONDS = 30.0


def _job_config(settings: Settings, ci_dir: Path) -> JobConfig:
    """How this worker runs each job: where, within which limits, and its logs' and cache's bounds."""
    return JobConfig(
        workspaces=ci_dir / "workspaces",
        limits=limits_from(settings),
        disk_bytes=settings.ci_job_disk_bytes,
        log_flush_seconds=settings.ci_log_flush_seconds,
        log_max_bytes=settings.ci_log_max_bytes,
        log_retry_seconds=settings.ci_log_retry_seconds,
        cache_max_bytes=settings.ci_cache_max_bytes,
        runtime_dir=ci_dir / "runtime",
        artifact_retention_days=settings.ci_log_retention_days,
        artifact_max_bytes=settings.ci_artifact_max_bytes,
    )


def _listing(settings: Settings, db: sessionmaker, mirror: GitMirror, actions: ActionSource) -> CIListingActivities:
    """The listing activity with the database reads it makes (rules, run numbers, reporter,
    environments' variables)."""
    return CIListingActivities(
        mirror,
        partial(environment_rules, db),
        actions,
        partial(assign_run_number, db),
        partial(has_reporter, db),
        failover_seconds=settings.database_failover_seconds,
        images=RegistryDigests(settings.ci_oci_registry, settings.ci_oci_registry_tls_verify)
        if settings.ci_oci_registry
        else None,
        environment_variables=partial(environment_variables_for, db),
    )


def _served_queues(settings: Settings, isolation: str) -> list[str]:
    """This worker's job queues, or a refusal to start naming the label maximum."""
    try:
        return job_queues(settings.ci_labels, settings.queue_prefix, isolation)
    except (TooManyLabels, ValueError) as exc:
        raise SystemExit(f"leasehold worker ci: {exc} (LEASEHOLD_CI_LABELS / --labels)") from exc


def _workers(
    settings: Settings,
    client: Client,
    jobs: CIJobActivities,
    db: sessionmaker,
    loop: asyncio.AbstractEventLoop,
    mirror: GitMirror,
    actions: ActionSource,
    queues: list[str],
    shared: SharedSlots,
) -> list[Worker]:
    """The job workers (one per queue, one slot budget), the control worker and the probe worker."""
    listing = _listing(settings, db, mirror, actions)
    reconcile = CIReconcileActivities(settings, db, mirror, client, loop)
    slots = shared.slots
    # Activities only: the version is reported, routing stays unversioned, so a run pinned to
    # an older build still gets any CI worker of its labels (docs/versioning.md).
    version = deployment_config(settings, BUILD_ID, routed=False)
    executor = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="ci-job")
    # With image queues beside them (``worker_ci.image_queues``: the budget then caps idle
    # permits), each label queue keeps one poller, so that idle label polls leave slots free
    # for the jobs image queues hand over.
    pollers = 1 if shared.idle_per_queue is not None else None
    workers = job_workers(client, queues, [jobs.run_job], shared, executor, version, pollers)
    workers.append(
        Worker(
            client,
            task_queue=ci_control_queue(settings.queue_prefix),
            activities=[listing.list_workflows, reconcile.list_repos, reconcile.reconcile_repo],
            activity_executor=ThreadPoolExecutor(max_workers=CONTROL_CONCURRENCY, thread_name_prefix="ci-control"),
            max_concurrent_activities=CONTROL_CONCURRENCY,
            deployment_config=version,
        )
    )
    workers.append(
        Worker(
            client,
            task_queue=ci_probe_queue(settings.queue_prefix),
            activities=[CIProbeActivities(client).served_queues],
            max_concurrent_activities=PROBE_CONCURRENCY,
            deployment_config=version,
        )
    )
    return workers


def _image_queues(
    settings: Settings, client: Client, sandbox: Sandbox, jobs: CIJobActivities, isolation: str
) -> tuple[SharedSlots, ImageQueues | None]:
    """The worker's slot budget, and the image queues of an OCI worker that routes by image
    (``ci_oci_affinity_images``), else None."""
    held = getattr(sandbox, "affinity_digests", None)
    if held is None or settings.ci_oci_affinity_images <= 0:
        return SharedSlots(settings.ci_job_slots), None
    label_sets = ci_label_subsets(settings.ci_labels)
    if settings.ci_job_slots <= IDLE_SLOTS_PER_LABEL_QUEUE * len(label_sets):
        # What the label queues' idle polls hold leaves no slot for a job an image queue hands
        # over: every such job would be refused.
        log.warning(
            "image affinity off: %d job slot(s) and %d label queue(s) leave no slot for image queues",
            settings.ci_job_slots,
            len(label_sets),
        )
        return SharedSlots(settings.ci_job_slots), None
    shared = SharedSlots(settings.ci_job_slots, idle_per_queue=IDLE_SLOTS_PER_LABEL_QUEUE)
    return shared, ImageQueues(
        client,
        label_sets,
        settings.queue_prefix,
        isolation,
        held,
        settings.ci_oci_affinity_images,
        jobs.run_job,
        shared,
        ThreadPoolExecutor(max_workers=settings.ci_oci_affinity_images, thread_name_prefix="ci-image-job"),
        deployment_config(settings, BUILD_ID, routed=False),
    )


async def serve(settings: Settings) -> None:
    """Run until SIGINT/SIGTERM; running jobs are stopped and retried elsewhere as new attempts."""
    state = {"ready": False}
    # Refused before the sandbox's self-test: a label set too large never starts.
    _served_queues(settings, DEFAULT_CI_ISOLATION)
    sandbox = make_sandbox(settings)
    # A gVisor worker serves the tenants whose plan asks for gVisor (their own queues).
    isolation = "gvisor" if sandbox.name == "gvisor" else DEFAULT_CI_ISOLATION
    queues = _served_queues(settings, isolation)
    server = serve_health(settings.metrics_host, settings.metrics_port or 0, lambda: state["ready"])
    log.info("ci worker health and metrics on http://%s:%s", settings.metrics_host, server.server_address[1])
    ci_dir = settings.data_dir / "ci"
    # Job roots a killed worker left: emptied as their own users, then removed (the root rule).
    swept = sweep_leftover_roots(ci_dir / "workspaces", sandbox, limits_from(settings))
    if swept:
        log.info("removed %d job roots left by killed workers", swept)
    db = init_database(settings.resolved_database_url)
    client = await connect(settings, identity="leasehold-ci")
    loop = asyncio.get_running_loop()
    mirror = GitMirror(ci_dir / "mirrors", ClonePolicy.from_settings(settings))
    actions = ActionSource.from_settings(settings, ci_dir / "action-mirrors")
    jobs = CIJobActivities(
        _job_config(settings, ci_dir),
        open_store(settings),
        sandbox,
        mirror,
        client,
        loop,
        DatabaseRunRecords(db, settings.database_failover_seconds),
        # The worker holds no secrets key: it trades each attempt's token at the API.
        ApiSecretSource(settings.resolved_api_internal_url, settings.database_failover_seconds),
        actions,
        artifacts=db,
    )
    shared, affinity = _image_queues(settings, client, sandbox, jobs, isolation)
    workers = _workers(settings, client, jobs, db, loop, mirror, actions, queues, shared)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # Idempotent: each CI worker makes sure the lost-webhook reconciler is scheduled.
    await ensure_reconcile_schedule(client, settings.queue_prefix, settings.ci_reconcile_interval_seconds)
    async with AsyncExitStack() as running:
        for worker in workers:
            await running.enter_async_context(worker)
        images = asyncio.create_task(affinity.run()) if affinity is not None else None
        state["ready"] = True
        log.info(
            "ci worker (%s sandbox, %d job slots) polling %s, %s and %s",
            sandbox.name,
            settings.ci_job_slots,
            ", ".join(queues),
            ci_control_queue(settings.queue_prefix),
            ci_probe_queue(settings.queue_prefix),
        )
        await stop.wait()
        state["ready"] = False
        log.info("ci worker shutting down")
        if images is not None:
            images.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await images
    # Finished jobs' roots still being emptied: the next start's sweep takes what is left.
    if not await asyncio.to_thread(jobs.reaper.drain, REAP_DRAIN_SECONDS):
        log.warning("job roots left to empty at exit; the next start-up sweep removes them")
    server.shutdown()


def main(settings: Settings) -> None:
    asyncio.run(serve(settings))
