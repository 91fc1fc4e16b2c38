"""Signals from the GPU worker to a job's workflow, sent from the (sync) activity thread."""

from __future__ import annotations

import asyncio
import logging

from temporalio.client import Client

from workflows.video.job import VideoJobWorkflow
from workflows.video.types import GenerationStarted

log = logging.getLogger(__name__)

SIGNAL_TIMEOUT_SECONDS = 5.0


class StartedAnnouncer:
    """Signals ``VideoJobWorkflow.generation_started`` through the worker's own client.

    Sync activities get no client of their own, so the worker binds its client and event loop
    here once it runs. Failure to signal is logged and ignored: the signal only mirrors state
    for listings and the Web UI, and must never cost the job its attempt.
    """

    def __init__(self) -> None:
        self._client: Client | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, client: Client, loop: asyncio.AbstractEventLoop) -> None:
        self._client, self._loop = client, loop

    def __call__(self, workflow_id: str, event: GenerationStarted) -> None:
        if self._client is None or self._loop is None:
            return
        handle = self._client.get_workflow_handle_for(VideoJobWorkflow.run, workflow_id)
        future = asyncio.run_coroutine_threadsafe(handle.signal(VideoJobWorkflow.generation_started, event), self._loop)
        try:
            future.result(timeout=SIGNAL_TIMEOUT_SECONDS)
        except Exception as exc:
            future.cancel()
            log.warning("could not signal %s that generation started: %s", workflow_id, exc)
