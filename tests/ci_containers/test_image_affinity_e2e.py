"""Image affinity end to end: two pushes of a ``container:`` job with the same image, through the
webhook, on the OCI stack's CI worker. Once the worker holds the image it polls that image's
queue (``worker_ci.image_queues``); the second job is scheduled there first and taken from it
by the worker that holds the image, which the job's log says, and the run's history shows.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import log_text, push_workflow, wait_run
from tests.ci_containers.conftest import Mirror
from worker_ci.images import RegistryDigests
from workflows.ci.ids import run_workflow_id
from workflows.queues import ci_image_queue, ci_queue

pytestmark = pytest.mark.slow

CONTAINER_JOB = """
on: push
jobs:
  build:
    runs-on: linux
    container:
      image: {image}
    steps:
      - run: echo "in the job's image"
"""


def _scheduled(env: WorkflowEnvironment, run_id: str) -> dict[str, str]:
    """The run's job activities: activity id -> the task queue it was scheduled on."""

    async def fetch() -> dict[str, str]:
        history = await env.client.get_workflow_handle(run_workflow_id(run_id)).fetch_history()
        return {
            a.activity_id: a.task_queue.name
            for a in (e.activity_task_scheduled_event_attributes for e in history.events)
            if a.activity_id
        }

    return asyncio.run(fetch())


def test_a_container_job_goes_to_the_worker_that_holds_its_image(
    oci_stack: CIStack, oci_mirror: Mirror, temporal_env: WorkflowEnvironment
) -> None:
    prefix = oci_stack.settings.queue_prefix
    digest = RegistryDigests(oci_mirror.host, tls_verify=False)(oci_mirror.postgres)
    assert digest is not None
    image_queue = ci_image_queue(["linux"], digest, prefix)
    text = CONTAINER_JOB.format(image=oci_mirror.postgres)
    first = push_workflow(oci_stack, text)
    run = wait_run(first.client, first.run_id, timeout=240)
    assert run["status"] == "success", (run, log_text(first.client, first.run_id, "build"))
    # The worker now holds the image: it polls the image's queue within a few seconds.
    worker_log = oci_stack.logs / "worker-ci.log"
    deadline = time.monotonic() + 60
    while f"image affinity: polling {image_queue}" not in worker_log.read_text(errors="replace"):
        assert time.monotonic() < deadline, "the worker never polled the image queue of the image it holds"
        time.sleep(0.5)

    second = push_workflow(oci_stack, text)
    run = wait_run(second.client, second.run_id, timeout=240)
    log = log_text(second.client, second.run_id, "build")
    assert run["status"] == "success", (run, log)
    assert f"the job's container: {oci_mirror.postgres} is {digest} (cached on this worker)" in log, log
    assert "in the job's image" in log
    # Taken from the image queue, never handed to the labels' queue.
    scheduled = _scheduled(temporal_env, second.run_id)
    assert scheduled.get("build#0@image") == image_queue, scheduled
    assert "build#0" not in scheduled, scheduled
    assert ci_queue(["linux"], prefix) not in [q for k, q in scheduled.items() if k.startswith("build")]
