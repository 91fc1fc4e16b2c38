"""``leasehold worker ci --labels linux``: runs CI jobs in sandboxes.

One process serves two task queues: ``ci_queue(labels)`` (the jobs whose ``runs-on`` equals
this worker's label set) and the control queue (git work for pushes: every CI worker holds
mirrors). Job concurrency is ``Settings.ci_job_slots`` (``ci_max_concurrent_jobs``, or sized
from the machine's CPUs); ``/metrics`` and ``/healthz`` come
from the shared health server.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from temporalio.worker import Worker

from activities.ci.actions import ActionSource
from activities.ci.git import CopiedTree, GitMirror, WorkTree
from activities.ci.job import CIJobActivities, JobConfig
from activities.ci.listing import CIListingActivities, environment_rules
from activities.ci.reconcile import CIReconcileActivities
from activities.ci.run_records import DatabaseRunRecords
from activities.ci.sandbox import SandboxError
from activities.ci.secrets import ApiSecretSource
from leasehold.client.ci.start import ensure_reconcile_schedule
from leasehold.clone_urls import ClonePolicy
from leasehold.database import init_database
from leasehold.health_server import serve_health
from leasehold.records.ci.run_numbers import assign_run_number
from leasehold.settings import Settings
from leasehold.storage import open_store
from leasehold.temporal import connect
from worker_ci.overlay import OverlayTree
from worker_ci.sandbox import limits_from, make_sandbox
from workflows.queues import ci_control_queue, ci_queue

log = logging.getLogger(__name__)

CONTROL_CONCURRENCY = 2


async def serve(settings: Settings) -> None:
    """Run until SIGINT/SIGTERM; running jobs are stopped and retried elsewhere as new attempts."""
    state = {"ready": False}
    server = serve_health("127.0.0.1", settings.metrics_port or 0, lambda: state["ready"])
    log.info("ci worker health and metrics on http://127.0.0.1:%s", server.server_address[1])
    sandbox = make_sandbox(settings)
    db = init_database(settings.resolved_database_url)
    client = await connect(settings, identity="leasehold-ci")
    loop = asyncio.get_running_loop()
    ci_dir = settings.data_dir / "ci"
    mirror = GitMirror(ci_dir / "mirrors", ClonePolicy.from_settings(settings))
    actions = ActionSource.from_settings(settings, ci_dir / "action-mirrors")
    worktree: WorkTree
    try:
        worktree = OverlayTree(ci_dir / "workspaces")
    except SandboxError as exc:
        log.warning("job checkouts are copies of the shared tree (no overlay): %s", exc)
        worktree = CopiedTree()
    jobs = CIJobActivities(
        JobConfig(
            workspaces=ci_dir / "workspaces",
            limits=limits_from(settings),
            disk_bytes=settings.ci_job_disk_bytes,
            log_flush_seconds=settings.ci_log_flush_seconds,
            log_max_bytes=settings.ci_log_max_bytes,
            log_retry_seconds=settings.ci_log_retry_seconds,
            cache_max_bytes=settings.ci_cache_max_bytes,
        ),
        open_store(settings),
        sandbox,
        mirror,
        client,
        loop,
        DatabaseRunRecords(db),
        # The worker holds no secrets key: it trades each attempt's token at the API.
        ApiSecretSource(settings.resolved_api_internal_url),
        actions,
        worktree,
    )
    listing = CIListingActivities(mirror, partial(environment_rules, db), actions, partial(assign_run_number, db))
    reconcile = CIReconcileActivities(settings, db, mirror, client, loop)
    job_queue = ci_queue(settings.ci_labels, settings.queue_prefix)
    slots = settings.ci_job_slots
    job_worker = Worker(
        client,
        task_queue=job_queue,
        activities=[jobs.run_job],
        activity_executor=ThreadPoolExecutor(max_workers=slots, thread_name_prefix="ci-job"),
        max_concurrent_activities=slots,
    )
    control_worker = Worker(
        client,
        task_queue=ci_control_queue(settings.queue_prefix),
        activities=[listing.list_workflows, reconcile.list_repos, reconcile.reconcile_repo],
        activity_executor=ThreadPoolExecutor(max_workers=CONTROL_CONCURRENCY, thread_name_prefix="ci-control"),
        max_concurrent_activities=CONTROL_CONCURRENCY,
    )
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # Idempotent: each CI worker makes sure the lost-webhook reconciler is scheduled.
    await ensure_reconcile_schedule(client, settings.queue_prefix, settings.ci_reconcile_interval_seconds)
    async with job_worker, control_worker:
        state["ready"] = True
        log.info(
            "ci worker (%s sandbox, %s checkouts, %d job slots) polling %s and %s",
            sandbox.name,
            worktree.name,
            slots,
            job_queue,
            control_worker.task_queue,
        )
        await stop.wait()
        state["ready"] = False
        log.info("ci worker shutting down")
    server.shutdown()


def main(settings: Settings) -> None:
    asyncio.run(serve(settings))
