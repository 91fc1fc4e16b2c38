"""Running a Temporal worker as a process: connect, serve health/metrics, stop on a signal."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable

from temporalio.client import Client
from temporalio.worker import Worker

from leasehold.health_server import serve_health
from leasehold.settings import Settings
from leasehold.temporal import connect
from leasehold.worker_versioning import promote

log = logging.getLogger(__name__)


async def run_worker(
    settings: Settings,
    name: str,
    build: Callable[[Client], Worker],
    on_sigterm: Callable[[], Awaitable[None] | None] | None = None,
    on_connect: Callable[[Client], Awaitable[None]] | None = None,
) -> None:
    """Run the worker ``build`` makes until SIGINT/SIGTERM, then shut it down gracefully.

    ``on_sigterm`` runs first on SIGTERM (the GPU worker turns it into a preemption
    checkpoint). ``on_connect`` runs once connected, before the worker polls (the orchestration
    worker creates its schedules there). ``/healthz`` answers 200 once the worker is polling,
    and, for a worker that opted into versioned routing, once its version is the deployment's
    current one (it gets no task before that; with ``worker_promote_current`` off, a rollout
    promotes it).
    """
    state = {"ready": False}
    server = serve_health(settings.metrics_host, settings.metrics_port or 0, lambda: state["ready"])
    log.info("%s worker health and metrics on http://%s:%s", name, settings.metrics_host, server.server_address[1])

    # One identity per process: the API counts the workers serving a model by identity.
    client = await connect(settings, identity=f"leasehold-{name}-{os.getpid()}@{socket.gethostname()}")
    if on_connect is not None:
        await on_connect(client)
    worker = build(client)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    background: set[asyncio.Task] = set()

    def _on_signal(sig: signal.Signals) -> None:
        log.info("%s worker received %s; shutting down", name, sig.name)
        if sig == signal.SIGTERM and on_sigterm is not None:
            result = on_sigterm()
            if asyncio.iscoroutine(result):
                task = loop.create_task(result)
                background.add(task)
                task.add_done_callback(background.discard)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, _on_signal, sig)

    deployment = worker.config().get("deployment_config")
    async with worker:
        if deployment is not None and deployment.use_worker_versioning and settings.worker_promote_current:
            await promote(client, deployment.version, client.identity)
        state["ready"] = True
        log.info("%s worker polling %s", name, worker.task_queue)
        await stop.wait()
        state["ready"] = False
    server.shutdown()
