"""The generation activity: one attempt at turning a video request into an MP4 and a thumbnail.

It runs on a GPU worker, which injects the loaded model, the video encoder and the object
store. One attempt:

* resumes from the newest valid checkpoint of the job (any attempt), else starts fresh;
* runs sampler steps, heartbeating ``GenerateProgress`` after each one;
* commits a checkpoint every ``checkpoint_interval_seconds`` and at once when the worker is
  told it will be preempted (SIGTERM), then fails the attempt as ``Preempted`` so Temporal
  hands the job to another worker right away;
* stops at once when the job is cancelled or this attempt lost its lease (the server answers
  a heartbeat with "not found" or "timed out"), writing nothing more;
* writes every object under ``<object_prefix>/attempt-<n>/``: a stale attempt's objects are
  never the ones the workflow records;
* every ``preview_every_steps`` steps (0: never) stores a small image of the model's current
  estimate (``VideoModel.preview``) at ``attempt-<n>/previews/step-<k>.<ext>`` and names it in
  the next heartbeat (``GenerateProgress.preview_key``), where the API finds it. Superseded
  previews are deleted once readers can no longer be holding their key (``PREVIEW_KEEP_SECONDS``);
  the job's cleanup removes the rest. Previews are best effort: one that fails is logged and
  skipped, and they never change the video's bytes.

A worker built with ``checkpoints=False`` (setting ``video_checkpoints``) neither resumes,
nor checkpoints periodically, nor at the notice: every attempt starts at step 0. That is the
restart-from-zero baseline the goodput benchmark measures checkpointing against.

This module stays free of torch and PyAV: the workflow imports it for the activity
definition. Models and encoders implement the small protocols below.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

from temporalio import activity
from temporalio.exceptions import ApplicationError, CancelledError

from activities.video.checkpoints import JobCheckpoints, attempt_prefix
from activities.video.definitions import GENERATE_VIDEO, VideoGenerationDefinition
from activities.video.references import read_reference
from leasehold.retry import retry_within
from leasehold.storage import ObjectStore
from workflows.video.models import format_size, get_model
from workflows.video.types import (
    SPRITESHEET_NAME,
    GenerateInput,
    GenerateProgress,
    GenerateResult,
    GenerationStarted,
    VideoErrorType,
)

log = logging.getLogger(__name__)

# How long the final video and thumbnail uploads are retried while the store is unreachable.
UPLOAD_RETRY_SECONDS = 120.0

# A gap this much longer than the heartbeat timeout between two steps (the process was
# stopped, or starved) means the server has probably given the job to another worker; the
# attempt asks the server before it writes anything more.
_LEASE_CHECK_FRACTION = 0.8
# How long to wait for the server's answer to that heartbeat.
_LEASE_CHECK_WAIT_SECONDS = 3.0


@dataclass(frozen=True)
class GenerationJob:
    """What a model generates: the request resolved against the model catalogue."""

    model: str
    prompt: str
    seed: int
    width: int
    height: int
    frames: int
    fps: int
    steps: int
    # Image-to-video: the first frame's image (its bytes, read from the store by the activity)
    # and their SHA-256, which is what the checkpoint fingerprint covers.
    reference: bytes | None = field(default=None, repr=False, compare=False)
    reference_sha256: str | None = None
    # Remix (video-to-video): the source video's MP4, read from the store, and its SHA-256.
    source_video: bytes | None = field(default=None, repr=False, compare=False)
    source_video_sha256: str | None = None


class VideoModel(Protocol):
    """A loaded model version. A real diffusion pipeline implements the same five methods."""

    name: str
    # Changes whenever the sampler changes in a way that makes old checkpoints meaningless.
    revision: str

    # A state is the whole generation state between two steps (what a checkpoint holds); it
    # is opaque to the activity except for its ``step`` attribute, the steps done so far.
    def init_state(self, job: GenerationJob) -> Any:
        """The state before the first step (noise drawn from the job's seed)."""
        ...

    def step(self, state: Any) -> None:
        """Advance ``state`` by one sampler step, in place."""
        ...

    def save_state(self, state: Any) -> bytes:
        """Serialize everything ``step`` depends on (latent, step, RNG state)."""
        ...

    def load_state(self, job: GenerationJob, data: bytes) -> Any:
        """Inverse of ``save_state``; raises ``ValueError`` when ``data`` is not a state of ``job``."""
        ...

    def decode(self, state: Any) -> Any:
        """The finished video as uint8 RGB frames, shape (frames, height, width, 3)."""
        ...

    def preview(self, state: Any, max_side: int) -> Any:
        """A cheap look at the video ``state`` is heading to: uint8 RGB frames (n, h, w, 3), a
        few frames, long side at most ``max_side``. Must not change ``state`` (nor its RNG)."""
        ...


@dataclass(frozen=True)
class EncodedVideo:
    """Files an encoder wrote."""

    video_path: Path
    video_content_type: str
    thumbnail_path: Path
    thumbnail_content_type: str
    thumbnail_extension: str
    frames: int
    # A JPEG grid of frames (the ``spritesheet`` content variant), stored next to the video.
    spritesheet_path: Path | None = None


class VideoEncoder(Protocol):
    """Turns decoded frames into a deterministic MP4 and a thumbnail image."""

    def encode(self, frames: Any, fps: int, directory: Path, progress: Callable[[], None]) -> EncodedVideo:
        """Write the files into ``directory``; call ``progress`` now and then (it heartbeats)."""
        ...


class PreviewEncoder(Protocol):
    """Turns preview frames into one small image."""

    def encode_preview(self, frames: Any) -> EncodedPreview:
        """Encode uint8 RGB frames (n, h, w, 3) as one image (e.g. a strip of the frames)."""
        ...


@dataclass(frozen=True)
class EncodedPreview:
    """One encoded preview image."""

    data: bytes
    content_type: str
    extension: str


# Previews an attempt keeps in the store. The API learns the newest key from heartbeats, which
# reach it a second or two late (throttled, then cached), so a preview stays at least this long
# after it was superseded; and at most this many are kept, whatever their age.
PREVIEW_KEEP_SECONDS = 30.0
PREVIEWS_KEPT_MAX = 50


class GenerationObserver(Protocol):
    """Receives measurements (the GPU worker exports them as Prometheus metrics)."""

    def generation_started(self, job_id: str, attempt: int, resumed_from_step: int) -> None: ...

    def step_done(self, seconds: float) -> None: ...

    def checkpoint_written(self, seconds: float, size: int) -> None: ...

    def generation_ended(self, outcome: str) -> None: ...


class _NoObserver:
    def generation_started(self, job_id: str, attempt: int, resumed_from_step: int) -> None:
        pass

    def step_done(self, seconds: float) -> None:
        pass

    def checkpoint_written(self, seconds: float, size: int) -> None:
        pass

    def generation_ended(self, outcome: str) -> None:
        pass


class _Stop(Exception):
    """Internal: the loop must stop; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def resolve_job(model_name: str, input: GenerateInput) -> GenerationJob:
    """Check the request against the catalogue; a request that cannot run fails for good."""
    request = input.request
    spec = get_model(request.model)
    if spec is None:
        raise ApplicationError(
            f"unknown model {request.model!r}", type=VideoErrorType.INVALID_REQUEST, non_retryable=True
        )
    if request.model != model_name:
        raise ApplicationError(
            f"this worker serves {model_name!r}, not {request.model!r}",
            type=VideoErrorType.MODEL_MISMATCH,
            non_retryable=True,
        )
    size = format_size(request.width, request.height)
    if not spec.accepts_size(size):
        raise ApplicationError(
            f"size {size} is not one of {', '.join(spec.sizes)}",
            type=VideoErrorType.INVALID_REQUEST,
            non_retryable=True,
        )
    if not spec.accepts_seconds(request.seconds):
        raise ApplicationError(
            f"seconds must be between {spec.min_seconds} and {spec.max_seconds}",
            type=VideoErrorType.INVALID_REQUEST,
            non_retryable=True,
        )
    steps = request.steps if request.steps is not None else spec.default_steps
    if not 1 <= steps <= spec.max_steps:
        raise ApplicationError(
            f"steps must be between 1 and {spec.max_steps}", type=VideoErrorType.INVALID_REQUEST, non_retryable=True
        )
    if not request.prompt.strip():
        raise ApplicationError("prompt is empty", type=VideoErrorType.INVALID_REQUEST, non_retryable=True)
    if spec.takes_image != (request.input_reference is not None):
        needs = "starts from an image: input_reference is required" if spec.takes_image else "takes no input_reference"
        raise ApplicationError(f"{spec.name} {needs}", type=VideoErrorType.INVALID_REQUEST, non_retryable=True)
    source = request.source_video
    if source is not None and not spec.remixes:
        raise ApplicationError(f"{spec.name} cannot remix", type=VideoErrorType.INVALID_REQUEST, non_retryable=True)
    return GenerationJob(
        # As asked: the model, the prompt, the seed and the frame size.
        **request.model_dump(include={"model", "prompt", "seed", "width", "height"}),
        frames=spec.frame_count(request.seconds),
        fps=spec.fps,
        steps=steps,
        reference_sha256=request.input_reference.sha256 if request.input_reference is not None else None,
        source_video_sha256=source.sha256 if source is not None else None,
    )


# The inputs' bytes: their SHA-256 fields stand for them in a fingerprint.
_INPUT_BYTES = ("reference", "source_video")


def job_fingerprint(model: VideoModel, job: GenerationJob) -> str:
    """Identifies the inputs a checkpoint was made for; a mismatch means it is not ours."""
    fields = {name: value for name, value in job.__dict__.items() if name not in _INPUT_BYTES}
    for name in ("reference_sha256", "source_video_sha256"):
        if fields[name] is None:
            # Text-to-video fingerprints stay what they were before image-to-video and remix existed.
            del fields[name]
    body = json.dumps({"revision": model.revision, **fields}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


class VideoGenerationActivities(VideoGenerationDefinition):
    """The generation activity with its dependencies: built once per GPU worker process."""

    def __init__(
        self,
        model: VideoModel,
        encoder: VideoEncoder,
        store: ObjectStore,
        observer: GenerationObserver | None = None,
        announce_started: Callable[[str, GenerationStarted], None] | None = None,
        checkpoints: bool = True,
        preview_every_steps: int = 0,
        preview_max_side: int = 256,
        preview_encoder: PreviewEncoder | None = None,
    ) -> None:
        self._model = model
        # Previews every this many steps (0, or no encoder: none); see the module docstring.
        self._preview_every_steps = preview_every_steps if preview_encoder is not None else 0
        self._preview_max_side = preview_max_side
        self._preview_encoder = preview_encoder
        # False: every attempt starts from step 0 and stores no checkpoint (the baseline).
        self._checkpoints = checkpoints
        # Tells the job's workflow an attempt started (the GPU worker signals it); optional.
        self._announce_started = announce_started
        self._encoder = encoder
        self._store = store
        self._observer = observer or _NoObserver()
        self._preemption = threading.Event()

    @property
    def announce_started(self) -> Callable[[str, GenerationStarted], None] | None:
        return self._announce_started

    def notify_preemption(self) -> None:
        """The worker is about to go away (SIGTERM): checkpoint now and hand the job back."""
        self._preemption.set()

    # The loop checks cancellation between steps, so no asynchronous exception can land in
    # the middle of a checkpoint upload.
    @activity.defn(name=GENERATE_VIDEO, no_thread_cancel_exception=True)
    def generate_video(self, input: GenerateInput) -> GenerateResult:
        """Run (or resume) one job; see the module docstring."""
        job = resolve_job(self._model.name, input)
        request = input.request
        if request.input_reference is not None:
            job = dataclasses.replace(job, reference=read_reference(self._store, request.input_reference))
        if request.source_video is not None:
            source = read_reference(self._store, request.source_video, "source video of the remix")
            job = dataclasses.replace(job, source_video=source)
        info = activity.info()
        attempt = info.attempt + input.attempt_offset
        outcome = "failed"
        try:
            result = _Attempt(self, input, job, attempt, info.heartbeat_timeout).run()
            outcome = "completed"
            return result
        except _Stop as stop:
            outcome = stop.reason
            if stop.reason == "preempted":
                raise ApplicationError(
                    "the worker was preempted; the job resumes from its checkpoint",
                    type=VideoErrorType.PREEMPTED,
                    non_retryable=False,
                    next_retry_delay=timedelta(seconds=0.2),
                ) from None
            raise CancelledError(stop.reason) from None
        except (ApplicationError, CancelledError):
            raise
        except (ValueError, RuntimeError, MemoryError) as exc:
            # The model rejected this input or ran out of memory on it: the job fails with a
            # reason, the worker keeps serving.
            log.exception("generation of %s failed", input.job_id)
            raise ApplicationError(
                f"{type(exc).__name__}: {exc}", type=VideoErrorType.GENERATION_FAILED, non_retryable=True
            ) from exc
        finally:
            self._observer.generation_ended(outcome)


class _Attempt:
    """The state of one running attempt (kept apart so the activity method stays short)."""

    def __init__(
        self,
        owner: VideoGenerationActivities,
        input: GenerateInput,
        job: GenerationJob,
        attempt: int,
        heartbeat_timeout: timedelta | None,
    ) -> None:
        self.owner = owner
        self.input = input
        self.job = job
        self.attempt = attempt
        self.model = owner._model
        self.store = owner._store
        self.observer = owner._observer
        self.prefix = attempt_prefix(input.object_prefix.rstrip("/"), attempt)
        self.checkpoints = JobCheckpoints(owner._store, input.object_prefix, attempt)
        self.fingerprint = job_fingerprint(self.model, job)
        self.heartbeat_timeout = heartbeat_timeout.total_seconds() if heartbeat_timeout else None
        self.progress = GenerateProgress(total_steps=job.steps, attempt=attempt)
        self.checkpoint_seconds = 0.0
        self.last_checkpoint_step = -1
        self.last_heartbeat = time.monotonic()
        # (key, when it was superseded) of the stored previews, oldest first; the newest last.
        self.preview_keys: list[tuple[str, float]] = []

    def heartbeat(self) -> None:
        self.progress.sent_at = time.time()
        activity.heartbeat(self.progress)
        self.last_heartbeat = time.monotonic()

    def check(self) -> None:
        """Raise ``_Stop`` when the attempt must end now; verify the lease after a long gap."""
        if self.heartbeat_timeout is not None:
            gap = time.monotonic() - self.last_heartbeat
            if gap > self.heartbeat_timeout * _LEASE_CHECK_FRACTION and not activity.is_cancelled():
                log.warning("no heartbeat for %.1fs; confirming the lease before going on", gap)
                self.heartbeat()
                activity.wait_for_cancelled_sync(timeout=_LEASE_CHECK_WAIT_SECONDS)
        if activity.is_cancelled():
            details = activity.cancellation_details()
            if details is not None and details.worker_shutdown:
                raise _Stop("preempted")
            if details is not None and details.cancel_requested:
                raise _Stop("cancelled")
            # Not found, timed out, paused, reset, or a failed heartbeat: another attempt
            # owns the job now, or will. Stop the GPU work and write nothing more.
            raise _Stop("lease_lost")
        # SIGTERM (the preemption notice) or any other graceful worker stop: hand the job back
        # with nothing lost.
        if self.owner._preemption.is_set() or activity.is_worker_shutdown():
            raise _Stop("preempted")

    def checkpoint(self, state: Any) -> bool:
        """Commit ``state``; ``False`` when the store refused it (the previous one stays valid).

        An unreachable store does not end the attempt: generation goes on, and the next
        interval tries again, so an outage costs at most the work since the last commit.
        """
        if state.step == self.last_checkpoint_step:
            return True
        started = time.monotonic()
        data = self.model.save_state(state)
        try:
            key = self.checkpoints.commit(state.step, self.job.steps, self.fingerprint, data)
        except Exception as exc:
            log.warning(
                "job %s attempt %d: checkpoint at step %d not stored (%s: %s); the previous one stays valid",
                self.input.job_id,
                self.attempt,
                state.step,
                type(exc).__name__,
                exc,
            )
            return False
        self.last_checkpoint_step = state.step
        self.progress.checkpoint_key = key
        self.progress.checkpoint_step = state.step
        self.heartbeat()
        try:
            self.checkpoints.prune()
        except Exception as exc:  # an extra old checkpoint is harmless; the next prune gets it
            log.warning("job %s: pruning old checkpoints failed: %s", self.input.job_id, exc)
        seconds = time.monotonic() - started
        self.checkpoint_seconds += seconds
        self.observer.checkpoint_written(seconds, len(data))
        log.info(
            "job %s attempt %d: checkpoint at step %d (%d bytes)",
            self.input.job_id,
            self.attempt,
            state.step,
            len(data),
        )
        return True

    def preview(self, state: Any) -> None:
        """Store a preview of ``state`` and name it in the heartbeat; failures are only logged."""
        encoder = self.owner._preview_encoder
        if encoder is None:
            return
        max_side = self.owner._preview_max_side
        try:
            frames = self.model.preview(state, max_side)
            shape = tuple(getattr(frames, "shape", ()))
            if len(shape) != 4 or shape[3] != 3 or shape[0] < 1 or max(shape[1], shape[2]) > max_side:
                raise ValueError(f"the model's preview has shape {shape}; want (n, h, w, 3), long side <= {max_side}")
            encoded = encoder.encode_preview(frames)
            key = f"{self.prefix}/previews/step-{state.step:06d}.{encoded.extension}"
            self.store.put(key, encoded.data, encoded.content_type)
        except Exception as exc:
            log.warning(
                "job %s: preview at step %d skipped (%s: %s)", self.input.job_id, state.step, type(exc).__name__, exc
            )
            return
        self.progress.preview_key = key
        self.progress.preview_step = state.step
        self.heartbeat()
        now = time.monotonic()
        if self.preview_keys:
            self.preview_keys[-1] = (self.preview_keys[-1][0], now)
        self.preview_keys.append((key, math.inf))
        while self.preview_keys and (
            len(self.preview_keys) > PREVIEWS_KEPT_MAX or now - self.preview_keys[0][1] > PREVIEW_KEEP_SECONDS
        ):
            old, _ = self.preview_keys.pop(0)
            try:
                self.store.delete(old)
            except Exception as exc:  # a leftover preview goes with the job's cleanup
                log.warning("job %s: deleting old preview %s failed: %s", self.input.job_id, old, exc)

    def upload(self, key: str, path: Path, content_type: str) -> None:
        """Store a final asset, riding out a store outage of up to ``UPLOAD_RETRY_SECONDS``.

        Between tries the attempt keeps heartbeating and still stops on cancel or lease loss.
        """

        def between_tries() -> None:
            self.heartbeat()
            self.check()

        error = retry_within(
            lambda: self.store.put_file(key, path, content_type),
            UPLOAD_RETRY_SECONDS,
            f"{key} of job {self.input.job_id}",
            log,
            between=between_tries,
        )
        if error is not None:
            raise error

    def run(self) -> GenerateResult:
        job = self.job
        restored = (
            self.checkpoints.newest_valid(self.fingerprint, lambda data: self.model.load_state(job, data))
            if self.owner._checkpoints
            else None
        )
        if restored is not None:
            state = restored.state
            self.last_checkpoint_step = state.step
            self.progress.checkpoint_key = restored.manifest_key
            self.progress.checkpoint_step = state.step
            log.info("job %s attempt %d resumes from %s", self.input.job_id, self.attempt, restored.manifest_key)
        else:
            state = self.model.init_state(job)
        resumed_from = state.step
        self.observer.generation_started(self.input.job_id, self.attempt, resumed_from)
        workflow_id = activity.info().workflow_id
        if self.owner._announce_started is not None and workflow_id:
            self.owner._announce_started(
                workflow_id, GenerationStarted(attempt=self.attempt, resumed_from_step=resumed_from)
            )
        self.progress.step = state.step
        self.heartbeat()

        gpu_started = time.monotonic()
        last_checkpoint = time.monotonic()
        interval = self.input.checkpoint_interval_seconds if self.owner._checkpoints else math.inf
        preview_every = self.owner._preview_every_steps
        try:
            while state.step < job.steps:
                self.check()
                step_started = time.monotonic()
                self.model.step(state)
                self.observer.step_done(time.monotonic() - step_started)
                self.progress.step = state.step
                self.heartbeat()
                if preview_every > 0 and state.step % preview_every == 0 and state.step < job.steps:
                    self.preview(state)
                if time.monotonic() - last_checkpoint >= interval and state.step < job.steps:
                    self.check()
                    self.checkpoint(state)
                    last_checkpoint = time.monotonic()
        except _Stop as stop:
            if stop.reason == "preempted" and self.owner._checkpoints:
                # The whole point of the notice: lose no work.
                self.checkpoint(state)
            raise
        self.check()
        frames = self.model.decode(state)
        gpu_seconds = time.monotonic() - gpu_started
        with tempfile.TemporaryDirectory(prefix="leasehold-video-") as tmp:
            encoded = self.owner._encoder.encode(frames, job.fps, Path(tmp), self.heartbeat)
            self.check()
            video_key = f"{self.prefix}/video.mp4"
            thumbnail_key = f"{self.prefix}/thumbnail.{encoded.thumbnail_extension}"
            self.upload(video_key, encoded.video_path, encoded.video_content_type)
            self.upload(thumbnail_key, encoded.thumbnail_path, encoded.thumbnail_content_type)
            spritesheet_key = None
            if encoded.spritesheet_path is not None:
                spritesheet_key = f"{self.prefix}/{SPRITESHEET_NAME}"
                self.upload(spritesheet_key, encoded.spritesheet_path, "image/jpeg")
        return GenerateResult(
            video_key=video_key,
            thumbnail_key=thumbnail_key,
            spritesheet_key=spritesheet_key,
            attempt=self.attempt,
            width=job.width,
            height=job.height,
            frames=encoded.frames,
            fps=job.fps,
            total_steps=job.steps,
            resumed_from_step=resumed_from,
            gpu_seconds=gpu_seconds,
            checkpoint_seconds=self.checkpoint_seconds,
        )
