"""``VideoJobWorkflow``: one video job, from acceptance to exactly one outcome.

Contract with the API (``api/``):

* Start: workflow id ``video-<job_id>``, task queue ``orchestration_queue(prefix)``, input
  ``VideoJobInput`` with ``generate_queue = video_queue(model, prefix)``,
  ``housekeeping_queue = orchestration_queue(prefix)``, and the heartbeat timeout and
  checkpoint interval from ``Settings``. Objects live under ``job_object_prefix(job_id)``.
  A deployment with reserved and preemptible capacity names the job's first-choice queue in
  ``generate_queue`` and the other in ``fallback_queue``: generation is handed between them
  whenever one has no free worker within the schedule-to-start wait (``_generate``).
* State: ``handle.query(VideoJobWorkflow.state)`` -> ``VideoJobState`` (also after the
  workflow closed). ``status`` is ``queued``, then ``in_progress`` once a GPU worker signals
  ``generation_started`` (it stays so while a preempted job waits for its next attempt); the
  API shows live ``in_progress``, ``progress`` and ``attempt`` from DescribeWorkflowExecution: the pending
  activity's state (STARTED), its ``attempt``, and its last heartbeat details, one
  ``GenerateProgress``. Search attributes mirror ``JobState``, ``UserId``, ``TenantId``,
  ``ModelVersion`` and ``Tier``.
* Result: when ``status == completed``, ``state.result`` holds the video and thumbnail keys
  (``result.video_key``, ``result.thumbnail_key``), recorded once, from the attempt that won.
  Checkpoints and every other object under the job prefix are deleted.
* Failure: ``status == failed`` with ``error_code`` (a ``VideoErrorType``) and
  ``error_message``; the workflow itself completes normally and returns the state.
* Cancel: ``handle.cancel()``. A queued job is cancelled at once; a running generation
  learns it from its next heartbeat response and stops; the workflow waits for that, deletes
  the job's objects and ends with ``status == cancelled`` (execution status Canceled).
* Read model: the state is written to its ``video_jobs`` row (``project_video_job`` on the
  housekeeping queue) at every transition, versioned by the history length when the write is
  scheduled. Writes are coalesced (one in flight; a burst of transitions costs one write), and
  the last snapshot is written before the workflow closes on every path, so the row holds the
  outcome once the execution is closed, and still after Temporal forgets it.
* Webhooks: once the row holds the outcome, ``deliver_video_event`` (orchestration queue,
  shielded from a late cancel) tells the owner's endpoints ``video.completed``/``failed``/
  ``cancelled``, retrying with back-off; the execution closes when it is done
  (``docs/webhooks.md``).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import Priority
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, TimeoutError, TimeoutType

with workflow.unsafe.imports_passed_through():
    from activities.video.definitions import (
        VideoGenerationDefinition,
        VideoHousekeepingDefinition,
        VideoProjectionDefinition,
        VideoWebhookDefinition,
    )
    from workflows import search_attributes as sa
    from workflows.queues import (
        VIDEO_CAPACITY_ATTEMPT_STRIDE,
        VIDEO_CAPACITY_FALLBACK_MAX,
        VIDEO_GENERATE_RETRY,
        VIDEO_GENERATE_SCHEDULE_TO_CLOSE,
        VIDEO_HOUSEKEEPING_RETRY,
        VIDEO_HOUSEKEEPING_TIMEOUT,
        VIDEO_PROJECTION_RETRY,
        VIDEO_PROJECTION_TIMEOUT,
        VIDEO_WEBHOOK_RETRY,
        VIDEO_WEBHOOK_TIMEOUT,
    )
    from workflows.snapshots import SnapshotWriter
    from workflows.video.types import (
        CleanupInput,
        GenerateInput,
        GenerateResult,
        GenerationStarted,
        ProjectVideoJobInput,
        VideoErrorType,
        VideoEventInput,
        VideoEventType,
        VideoJobFacts,
        VideoJobInput,
        VideoJobState,
        VideoStatus,
        job_object_prefix,
    )


# Pinned (the orchestration worker's default): a job runs to its end on the build that
# admitted it (minutes to hours).
@workflow.defn
class VideoJobWorkflow:
    """Runs the generation activity until the job completes, fails or is cancelled."""

    @workflow.init
    def __init__(self, input: VideoJobInput) -> None:
        # The job's facts are the input's own (one model, not a field-by-field copy).
        facts = {name: getattr(input, name) for name in VideoJobFacts.model_fields}
        self._state = VideoJobState(**facts, status=VideoStatus.QUEUED, created_at=input.created_at)
        # The read model's writer; versions are the history length, which only grows within the
        # one execution a job ever has.
        self._snapshots = SnapshotWriter(
            self._write_snapshot, f"video {input.job_id}", lambda: workflow.info().get_current_history_length()
        )
        self._housekeeping_queue = input.housekeeping_queue

    @workflow.query
    def state(self) -> VideoJobState:
        """Everything the API shows about this job."""
        return self._state

    @workflow.signal
    def generation_started(self, event: GenerationStarted) -> None:
        """A GPU worker began an attempt: mirror ``in_progress`` for listings and the Web UI.

        Best effort and informational: a late signal from a stale attempt, or one after the
        outcome, changes no outcome. The API still reads live progress from the pending activity.
        """
        if event.attempt > self._state.attempts_started:
            self._state.attempts_started = event.attempt
            self._snapshots.changed()
        if self._state.status is VideoStatus.QUEUED:
            self._set_status(VideoStatus.IN_PROGRESS)

    def _set_status(self, status: VideoStatus) -> None:
        self._state.status = status
        workflow.upsert_search_attributes([sa.JOB_STATE.value_set(status.value)])
        self._snapshots.changed()

    async def _write_snapshot(self, version: int) -> None:
        """One read-model write of the state as it is now (``SnapshotWriter`` calls it)."""
        await workflow.execute_activity_method(
            VideoProjectionDefinition.project_video_job,
            ProjectVideoJobInput(state=self._state.model_copy(deep=True), version=version),
            task_queue=self._housekeeping_queue,
            start_to_close_timeout=VIDEO_PROJECTION_TIMEOUT,
            retry_policy=VIDEO_PROJECTION_RETRY,
        )

    @workflow.run
    async def run(self, input: VideoJobInput) -> VideoJobState:
        workflow.upsert_search_attributes(
            [
                sa.JOB_STATE.value_set(VideoStatus.QUEUED.value),
                sa.USER_ID.value_set(input.user_id),
                sa.TENANT_ID.value_set(input.tenant_id),
                sa.MODEL_VERSION.value_set(input.request.model),
                sa.TIER.value_set(input.tier),
            ]
        )
        self._state.started_at = workflow.now()
        self._snapshots.start()  # accepted: the first snapshot (queued, engine started)
        try:
            result = await self._generate(input)
        except (asyncio.CancelledError, CancelledError):
            await self._cleanup(input, keep=[])
            self._state.completed_at = workflow.now()
            self._set_status(VideoStatus.CANCELLED)
            await self._snapshots.flush()
            await self._announce(VideoEventType.CANCELLED)
            raise
        except ActivityError as err:
            # The server delivers a cancel to the activity only when this workflow asked for
            # it, so a cancelled activity means a cancelled job.
            if isinstance(err.cause, CancelledError):
                await self._cleanup(input, keep=[])
                self._state.completed_at = workflow.now()
                self._set_status(VideoStatus.CANCELLED)
                await self._snapshots.flush()
                await self._announce(VideoEventType.CANCELLED)
                raise CancelledError("job cancelled") from err
            code, message = _failure_reason(err)
            self._state.error_code = code
            self._state.error_message = message
            await self._cleanup(input, keep=[])
            self._state.completed_at = workflow.now()
            self._set_status(VideoStatus.FAILED)
            await self._snapshots.flush()
            await self._announce(VideoEventType.FAILED)
            return self._state
        self._record(input, result)
        await self._cleanup(
            input, keep=[k for k in (result.video_key, result.thumbnail_key, result.spritesheet_key) if k]
        )
        self._set_status(VideoStatus.COMPLETED)
        await self._snapshots.flush()
        await self._announce(VideoEventType.COMPLETED)
        return self._state

    async def _generate(self, input: VideoJobInput) -> GenerateResult:
        """Generation on the job's queue; with a ``fallback_queue`` (reserved/preemptible
        capacity), handed to the other queue whenever the current one has no free worker within
        the schedule-to-start wait, which doubles at each hand-over up to a cap."""
        queue, other = input.generate_queue, input.fallback_queue
        wait = timedelta(seconds=input.fallback_after_seconds)
        hand_overs = 0
        while True:
            # The job's budget is one, whichever queue runs it.
            left = VIDEO_GENERATE_SCHEDULE_TO_CLOSE - (workflow.now() - (self._state.started_at or workflow.now()))
            try:
                return await workflow.execute_activity_method(
                    VideoGenerationDefinition.generate_video,
                    GenerateInput(
                        job_id=input.job_id,
                        request=input.request,
                        object_prefix=job_object_prefix(input.job_id),
                        checkpoint_interval_seconds=input.checkpoint_interval_seconds,
                        attempt_offset=hand_overs * VIDEO_CAPACITY_ATTEMPT_STRIDE,
                    ),
                    task_queue=queue,
                    schedule_to_close_timeout=VIDEO_GENERATE_SCHEDULE_TO_CLOSE if other is None else left,
                    schedule_to_start_timeout=None if other is None else wait,
                    heartbeat_timeout=timedelta(seconds=input.heartbeat_timeout_seconds),
                    retry_policy=VIDEO_GENERATE_RETRY,
                    # Cancel must mean the GPU stopped, not just that it was asked to.
                    cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                    priority=Priority(
                        priority_key=input.priority_key,
                        fairness_key=input.fairness_key,
                        fairness_weight=input.fairness_weight,
                    ),
                )
            except ActivityError as err:
                # Not retried by the server: no worker of this capacity type took it in time.
                cause = err.cause
                if other is None or not (
                    isinstance(cause, TimeoutError) and cause.type == TimeoutType.SCHEDULE_TO_START
                ):
                    raise
                if left <= wait:
                    raise
                queue, other = other, queue
                wait = min(wait * 2, VIDEO_CAPACITY_FALLBACK_MAX)
                hand_overs += 1

    def _record(self, input: VideoJobInput, result: GenerateResult) -> None:
        # The server accepts one completion per activity, from the current attempt; this
        # guard keeps "recorded once" true even if the code above ever grows a retry.
        if self._state.result is not None:
            return
        now = workflow.now()
        self._state.result = result
        self._state.attempts_started = result.attempt
        self._state.completed_at = now
        self._state.expires_at = now + timedelta(seconds=input.expires_after_seconds)

    async def _announce(self, event_type: VideoEventType) -> None:
        """Deliver the recorded outcome to the owner's webhooks (after the row holds it).

        Shielded from a late cancel like cleanup; a delivery that fails for good changes no
        outcome (its log says what happened).
        """
        delivery = asyncio.ensure_future(
            workflow.execute_activity_method(
                VideoWebhookDefinition.deliver_video_event,
                VideoEventInput(state=self._state.model_copy(deep=True), event_type=event_type),
                task_queue=self._housekeeping_queue,
                start_to_close_timeout=VIDEO_WEBHOOK_TIMEOUT,
                retry_policy=VIDEO_WEBHOOK_RETRY,
            )
        )
        try:
            await _shielded(delivery)
        except ActivityError as err:
            workflow.logger.warning("webhooks of %s not delivered: %s", self._state.job_id, err.cause or err)

    async def _cleanup(self, input: VideoJobInput, keep: list[str]) -> None:
        cleanup = asyncio.ensure_future(
            workflow.execute_activity_method(
                VideoHousekeepingDefinition.delete_video_objects,
                CleanupInput(prefix=job_object_prefix(input.job_id), keep=keep),
                task_queue=input.housekeeping_queue,
                start_to_close_timeout=VIDEO_HOUSEKEEPING_TIMEOUT,
                retry_policy=VIDEO_HOUSEKEEPING_RETRY,
            )
        )
        try:
            await asyncio.shield(cleanup)
        except asyncio.CancelledError:
            # A cancel that lands after generation ended changes nothing: the job keeps its
            # outcome, and its leftovers still have to go.
            await cleanup


async def _shielded(task: asyncio.Future[Any]) -> None:
    """Await ``task`` to its end even if the workflow is cancelled meanwhile."""
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await task


def _failure_reason(err: ActivityError) -> tuple[str, str]:
    """The error code and message a failed generation reports to the user."""
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return cause.type or VideoErrorType.INTERNAL.value, cause.message
    if isinstance(cause, TimeoutError):
        return VideoErrorType.TIMED_OUT.value, "the job did not finish within its time budget"
    return VideoErrorType.INTERNAL.value, str(cause or err)
