"""Wan 2.1 image-to-video from ``diffusers``: the text-to-video loop, conditioned on an image.

``WanImageToVideoPipeline.__call__`` differs from the text-to-video one in three places, and
so does this model (everything else, checkpoints included, is ``WanVideoModel``'s):

* the image's CLIP embedding (``encode_image``) goes to every transformer call;
* ``prepare_latents`` draws the noise from the job's generator, then encodes the image with the
  VAE (its mode, no sampling) into a *condition*: a mask saying which frames are given (the
  first) and the image's latents;
* each step feeds ``cat([latents, condition])`` to the transformer.

The embedding and the condition are fixed for the whole job, so the checkpoint carries them
(``DiffusersState.condition``/``image_embeds``): a resumed attempt needs neither the image nor
the image encoder, and its bytes are those of an uninterrupted run.

The prompt is encoded by ``WanPipeline.encode_prompt`` over the same tokenizer and text
encoder: the image-to-video pipeline's copy of it is the same code but calls ``ftfy``
whether or not it is installed (diffusers 0.42), and ``ftfy`` is no dependency of ours.
With ``ftfy`` installed both clean the text alike.
"""

from __future__ import annotations

import io
from typing import Any

import torch

from activities.video.generation import GenerationJob
from worker_gpu.models.diffusers_video import DiffusersState, WanVideoModel


def decode_reference(data: bytes, width: int, height: int) -> Any:
    """The job's image as an RGB ``PIL.Image``; ``ValueError`` when it is not a readable image
    of the job's size (the API checked both; a worker checks again before spending a GPU on it)."""
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise ValueError(f"input_reference is not a readable image: {exc}") from None
    if image.size != (width, height):
        raise ValueError(f"input_reference is {image.size[0]}x{image.size[1]}, the video {width}x{height}")
    return image.convert("RGB")


class WanImageToVideoModel(WanVideoModel):
    """A Wan 2.1 image-to-video pipeline (``WanImageToVideoPipeline`` layout) from a catalogue entry."""

    pipeline_class = "WanImageToVideoPipeline"
    takes_image = True
    _text_pipe: Any = None

    def _prompt_encoder(self) -> Any:
        if self._text_pipe is None:
            from diffusers import WanPipeline

            pipe = self.pipe
            # The same components (no copy): only the text-to-video pipeline's prompt code is wanted.
            self._text_pipe = WanPipeline(
                tokenizer=pipe.tokenizer,
                text_encoder=pipe.text_encoder,
                vae=pipe.vae,
                scheduler=pipe.scheduler,
                transformer=pipe.transformer,
            )
        return self._text_pipe

    def _init_latents(self, state: DiffusersState) -> None:
        job: GenerationJob = state.job
        if job.reference is None:
            raise ValueError(f"{self.name} starts from an image: the job has no input_reference")
        pipe = self.pipe
        image = decode_reference(job.reference, job.width, job.height)
        dtype = pipe.transformer.dtype
        # The order of __call__: the image embedding, then the noise, then the VAE's condition.
        state.image_embeds = pipe.encode_image(image, self.device).to(dtype)
        pixels = pipe.video_processor.preprocess(image, height=job.height, width=job.width)
        state.latents, state.condition = self._prepare_latents(
            state, (pixels.to(self.device, dtype=torch.float32),), pipe.vae.config.z_dim
        )
