"""Wan 2.1 video-to-video from ``diffusers``: remixes of a finished video, on the text-to-video loop.

A ``wan-v2v`` model is Wan 2.1 text-to-video weights (``WanPipeline`` layout, the weights
``WanVideoToVideoPipeline``'s own example loads): a job without a source video is plain
text-to-video (``WanVideoModel``), and a remix (``GenerationJob.source_video``) runs what
``WanVideoToVideoPipeline.__call__`` runs, which differs from text-to-video in two places:

* the schedule: ``strength`` skips its noisiest steps. A schedule of ``N`` steps starts at
  index ``N - int(N x strength)``; the job's ``steps`` are the steps actually run, so ``N`` is
  the least length that leaves exactly that many (``schedule_length``), and the state's
  ``offset`` is where step 0 sits in it;
* the initial latents: the source video's frames, VAE-encoded (its mode, no sampling),
  normalised, and noised to the first step's level with noise from the job's generator
  (``prepare_latents`` of a ``WanVideoToVideoPipeline`` over the same components and the
  job's scheduler).

Everything after that, checkpoints included, is ``WanVideoModel``'s: the latents carry the
source, so a resumed attempt needs no source video and resumes byte-identically.

The source is the MP4 the remixed job produced, decoded with PyAV; when the remix asks for
another length its frames are resampled (nearest in time) to the job's count, and for
another size the pipeline's video processor resizes them.
"""

from __future__ import annotations

import io
from typing import Any

import torch

from activities.video.generation import GenerationJob
from worker_gpu.models.diffusers_video import DiffusersState, WanVideoModel


def schedule_length(steps: int, strength: float) -> int:
    """The least schedule length ``N`` whose video-to-video run (``int(N x strength)`` steps, as
    ``WanVideoToVideoPipeline.get_timesteps`` cuts it) is exactly ``steps`` steps."""
    if not 0 < strength <= 1 or steps < 1:
        raise ValueError(f"need steps >= 1 and 0 < strength <= 1 (got {steps}, {strength})")
    length = steps
    while min(int(length * strength), length) < steps:
        length += 1
    return length


def decode_source(data: bytes, frames: int) -> list[Any]:
    """The source video's frames as RGB ``PIL.Image``s, resampled to ``frames``; ``ValueError``
    when it is not a readable video."""
    import av
    from PIL import Image

    try:
        with av.open(io.BytesIO(data), "r") as container:
            decoded = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    except (av.FFmpegError, IndexError) as exc:
        raise ValueError(f"the source video is not readable: {exc}") from None
    if not decoded:
        raise ValueError("the source video has no frames")
    count = len(decoded)
    picks = [round(i * (count - 1) / (frames - 1)) if frames > 1 else 0 for i in range(frames)]
    return [Image.fromarray(decoded[index]) for index in picks]


class WanVideoToVideoModel(WanVideoModel):
    """Wan 2.1 text-to-video weights that also remix (``WanVideoToVideoPipeline``'s loop)."""

    def _schedule(self, job: GenerationJob) -> tuple[int, int]:
        if job.source_video_sha256 is None:
            return super()._schedule(job)
        length = schedule_length(job.steps, self.spec.remix_strength)
        return length, length - job.steps

    def _video_pipe(self, scheduler: Any) -> Any:
        """A ``WanVideoToVideoPipeline`` over the loaded components and the job's scheduler (no
        copy): its ``prepare_latents`` noises with the scheduler it holds."""
        from diffusers import WanVideoToVideoPipeline

        pipe = self.pipe
        return WanVideoToVideoPipeline(
            tokenizer=pipe.tokenizer,
            text_encoder=pipe.text_encoder,
            vae=pipe.vae,
            scheduler=scheduler,
            transformer=pipe.transformer,
        )

    def _init_latents(self, state: DiffusersState) -> None:
        job: GenerationJob = state.job
        if job.source_video_sha256 is None:
            super()._init_latents(state)
            return
        if job.source_video is None:
            raise ValueError(f"{self.name}: the remix's source video was not read")
        video_pipe = self._video_pipe(state.scheduler)
        frames = decode_source(job.source_video, job.frames)
        video = video_pipe.video_processor.preprocess_video(frames, height=job.height, width=job.width)
        order = state.scheduler.order
        first = state.scheduler.timesteps[state.offset * order : state.offset * order + 1]
        state.latents = video_pipe.prepare_latents(
            video.to(self.device, dtype=torch.float32),
            1,
            self.pipe.transformer.config.in_channels,
            job.height,
            job.width,
            torch.float32,
            self.device,
            state.generator,
            None,
            first,
        )
