"""LTX-Video from ``diffusers`` (``LTXPipeline``, ``LTXImageToVideoPipeline``), one step at a time.

As for Wan (``worker_gpu.models.diffusers_video``, whose loading, pacing and checkpoint format
this reuses), ``__call__`` cannot start mid-way, so the loop is written against the components
exactly as ``__call__`` runs it. What LTX does differently, and so does this loop:

* latents are *packed*: one token per latent pixel, ``(1, frames x height x width, channels)``;
  they are unpacked only to decode (and, for image-to-video, around each scheduler step);
* the schedule is ``sigmas = linspace(1, 1/N, N)`` shifted by ``mu``, which grows with the
  video's token count (``calculate_shift`` over the scheduler's config): a job's size changes
  its timesteps, so they are rebuilt from the job on resume, never saved;
* classifier-free guidance is one transformer call on a batch of two (negative first), with the
  prompts' attention masks; the masks are the tokenizer's and follow from the job's prompt (the
  tokenizer's files are in the version hash), so a resumed state recomputes them;
* the transformer takes the latent grid and ``rope_interpolation_scale``, which reads the fps;
* the VAE decode of 0.9.1 and later is conditioned on a timestep (``DECODE_TIMESTEP``) and
  mixes in noise (``DECODE_NOISE_SCALE``) drawn from the job's generator *after* the last step:
  the generator's state is in every checkpoint, so a resumed run draws the same noise. Its
  decoder also injects noise from torch's *global* generator (``decoder_inject_noise``); the
  decode runs with that generator forked and seeded from the job's seed, so the bytes do not
  depend on what the process did before.

Image-to-video (``LTXImageToVideoModel``): ``prepare_latents`` VAE-encodes the image (sampling
from the job's generator), sets the first latent frame to it and noises the rest; a
conditioning mask (1 for the image's tokens) scales each token's timestep, and the scheduler
steps only the frames after the first. The mask rides in ``DiffusersState.condition``; the first
frame's latents are in the latents, so a resumed attempt needs no image.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from activities.video.generation import GenerationJob
from worker_gpu.models.diffusers_video import DiffusersState, WanVideoModel
from worker_gpu.models.wan_i2v import decode_reference
from workflows.video.models import VideoModelSpec

# LTXPipeline's default prompt length (tokens).
MAX_SEQUENCE_LENGTH = 128
# For timestep-conditioned VAEs (LTX-Video 0.9.1 and later), the values the model's publishers
# recommend: the decode's timestep and how much fresh noise is mixed into the latents first.
DECODE_TIMESTEP = 0.05
DECODE_NOISE_SCALE = 0.025
# LTXPipeline.check_inputs: width and height divide by 32 whatever the VAE.
_PIPELINE_SIZE_MULTIPLE = 32


@dataclass
class LTXState(DiffusersState):
    """A Wan state plus the prompts' attention masks (derived from the job, so not saved)."""

    prompt_mask: torch.Tensor | None = None
    negative_mask: torch.Tensor | None = None


class LTXVideoModel(WanVideoModel):
    """An LTX-Video text-to-video pipeline (``LTXPipeline`` layout) from a catalogue entry."""

    pipeline_class = "LTXPipeline"

    def _check_spec(self, spec: VideoModelSpec) -> None:
        if spec.scheduler == "unipc":
            # LTX's schedule is custom sigmas shifted by mu, which UniPC's set_timesteps lacks.
            raise ValueError(f"model {spec.name}: LTX-Video samples with flow-euler (the pipeline's), not unipc")

    # Geometry ---------------------------------------------------------------------------

    def _grid(self, job: GenerationJob) -> tuple[int, int, int]:
        """The latent (frames, height, width) of a job, as ``__call__`` computes it."""
        pipe = self.pipe
        spatial = pipe.vae_spatial_compression_ratio
        return (job.frames - 1) // pipe.vae_temporal_compression_ratio + 1, job.height // spatial, job.width // spatial

    def _check_job(self, job: GenerationJob) -> None:
        pipe = self.pipe
        multiple = math.lcm(
            _PIPELINE_SIZE_MULTIPLE, pipe.vae_spatial_compression_ratio * pipe.transformer_spatial_patch_size
        )
        if job.width % multiple or job.height % multiple:
            raise ValueError(f"width and height must be multiples of {multiple} for {self.name}")
        if (job.frames - 1) % pipe.vae_temporal_compression_ratio:
            raise ValueError(f"frames must be k x {pipe.vae_temporal_compression_ratio} + 1 for {self.name}")

    def _unpack(self, latents: torch.Tensor, job: GenerationJob) -> torch.Tensor:
        pipe = self.pipe
        return pipe._unpack_latents(
            latents, *self._grid(job), pipe.transformer_spatial_patch_size, pipe.transformer_temporal_patch_size
        )

    def _pack(self, latents: torch.Tensor) -> torch.Tensor:
        pipe = self.pipe
        return pipe._pack_latents(latents, pipe.transformer_spatial_patch_size, pipe.transformer_temporal_patch_size)

    def _scheduler(self, job: GenerationJob) -> Any:
        from diffusers.pipelines.ltx.pipeline_ltx import calculate_shift

        if job.steps < 1:
            raise ValueError(f"a job of {self.name} needs at least one step")
        scheduler = type(self.pipe.scheduler).from_config(self.pipe.scheduler.config)
        frames, height, width = self._grid(job)
        config = scheduler.config
        mu = calculate_shift(
            frames * height * width,
            config.get("base_image_seq_len", 256),
            config.get("max_image_seq_len", 4096),
            config.get("base_shift", 0.5),
            config.get("max_shift", 1.15),
        )
        sigmas = np.linspace(1.0, 1 / job.steps, job.steps)
        scheduler.set_timesteps(sigmas=sigmas, mu=mu, device=self.device)
        # __call__ leaves it unset and the scheduler finds index 0 from the first timestep.
        scheduler.set_begin_index(0)
        return scheduler

    # The model interface ----------------------------------------------------------------

    def _masks(self, job: GenerationJob, guided: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The prompt's and the negative prompt's attention masks, as ``_get_t5_prompt_embeds`` makes them."""

        def mask(text: str) -> torch.Tensor:
            tokens = self.pipe.tokenizer(
                [text],
                padding="max_length",
                max_length=MAX_SEQUENCE_LENGTH,
                truncation=True,
                add_special_tokens=True,
                return_tensors="pt",
            )
            return tokens.attention_mask.bool().to(self.device)

        return mask(job.prompt), mask(self.spec.negative_prompt) if guided else None

    @torch.no_grad()
    def init_state(self, job: GenerationJob) -> LTXState:
        self._check_job(job)
        pipe = self.pipe
        guidance = self.spec.guidance_scale
        prompt_embeds, prompt_mask, negative_embeds, negative_mask = pipe.encode_prompt(
            prompt=job.prompt,
            negative_prompt=self.spec.negative_prompt,
            do_classifier_free_guidance=guidance > 1.0,
            max_sequence_length=MAX_SEQUENCE_LENGTH,
            device=self.device,
        )
        dtype = pipe.transformer.dtype
        state = LTXState(
            job=job,
            step=0,
            latents=torch.empty(0),
            prompt_embeds=prompt_embeds.to(dtype),
            negative_embeds=None if negative_embeds is None else negative_embeds.to(dtype),
            guidance_scale=guidance,
            generator=torch.Generator(device="cpu").manual_seed(job.seed),
            scheduler=self._scheduler(job),
            prompt_mask=prompt_mask,
            negative_mask=negative_mask,
        )
        self._init_latents(state)
        return state

    def _step(self, state: DiffusersState) -> None:
        if not isinstance(state, LTXState) or state.prompt_mask is None:
            raise TypeError("an LTX step needs an LTX state (with the prompt's attention mask)")
        pipe = self.pipe
        t = state.scheduler.timesteps[state.step]
        guided = state.negative_embeds is not None
        embeds, mask, latents_in = state.prompt_embeds, state.prompt_mask, state.latents
        if state.negative_embeds is not None:
            if state.negative_mask is None:
                raise TypeError("a guided LTX step needs the negative prompt's attention mask")
            # One call on a batch of two, negative first, as __call__ (a batch rounds otherwise).
            embeds = torch.cat([state.negative_embeds, state.prompt_embeds])
            mask = torch.cat([state.negative_mask, state.prompt_mask])
            latents_in = torch.cat([state.latents] * 2)
        latents_in = latents_in.to(embeds.dtype)
        timestep = t.expand(latents_in.shape[0])
        if state.condition is not None:
            # Image-to-video: the image's tokens are at timestep 0.
            condition = torch.cat([state.condition] * 2) if guided else state.condition
            timestep = timestep.unsqueeze(-1) * (1 - condition)
        frames, height, width = self._grid(state.job)
        spatial = pipe.vae_spatial_compression_ratio
        with pipe.transformer.cache_context("cond_uncond"):
            noise_pred = pipe.transformer(
                hidden_states=latents_in,
                encoder_hidden_states=embeds,
                timestep=timestep,
                encoder_attention_mask=mask,
                num_frames=frames,
                height=height,
                width=width,
                rope_interpolation_scale=(pipe.vae_temporal_compression_ratio / state.job.fps, spatial, spatial),
                attention_kwargs=None,
                return_dict=False,
            )[0]
        noise_pred = noise_pred.float()
        if guided:
            noise_uncond, noise_text = noise_pred.chunk(2)
            noise_pred = noise_uncond + state.guidance_scale * (noise_text - noise_uncond)
        state.latents = self._advance(state, noise_pred, t)
        state.step += 1

    def _advance(self, state: DiffusersState, noise_pred: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """The scheduler's step over the latents (a subclass keeps its given frames)."""
        return state.scheduler.step(noise_pred, t, state.latents, return_dict=False)[0]

    def _decode_latents(self, latents: torch.Tensor, job: GenerationJob, generator: torch.Generator) -> Any:
        """Packed latents -> the VAE's video tensor, as the end of ``__call__`` (decode noise
        from ``generator``, the decoder's own noise from the global generator seeded by the job)."""
        from diffusers.utils.torch_utils import randn_tensor

        pipe = self.pipe
        vae = pipe.vae
        latents = pipe._denormalize_latents(
            self._unpack(latents, job), vae.latents_mean, vae.latents_std, vae.config.scaling_factor
        )
        latents = latents.to(pipe.transformer.dtype)
        timestep = None
        if vae.config.timestep_conditioning:
            noise = randn_tensor(latents.shape, generator=generator, device=self.device, dtype=latents.dtype)
            timestep = torch.tensor([DECODE_TIMESTEP], device=self.device, dtype=latents.dtype)
            scale = torch.tensor([DECODE_NOISE_SCALE], device=self.device, dtype=latents.dtype)[
                :, None, None, None, None
            ]
            latents = (1 - scale) * latents + scale * noise
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(job.seed)
            return vae.decode(latents.to(vae.dtype), timestep, return_dict=False)[0]

    @torch.no_grad()
    def decode(self, state: DiffusersState) -> np.ndarray:
        # A copy of the generator: decoding twice (or after a checkpoint) draws the same noise.
        generator = torch.Generator(device="cpu")
        generator.set_state(state.generator.get_state())
        video = self._decode_latents(state.latents, state.job, generator)
        frames = self.pipe.video_processor.postprocess_video(video, output_type="np")[0]
        return np.clip(np.round(np.asarray(frames, dtype=np.float32) * 255.0), 0, 255).astype(np.uint8)

    # Previews ---------------------------------------------------------------------------

    @torch.no_grad()
    def _latent_to_rgb(self) -> torch.Tensor:
        """As Wan's: a (channels + 1) x 3 least-squares map fitted on a seeded tiny decode."""
        if self._preview_map is None:
            pipe = self.pipe
            channels = pipe.vae.config.latent_channels
            generator = torch.Generator(device="cpu").manual_seed(0)
            latents = torch.randn((1, channels, 1, 4, 4), generator=generator)
            job = GenerationJob(
                model=self.name, prompt="", seed=0, width=4 * pipe.vae_spatial_compression_ratio,
                height=4 * pipe.vae_spatial_compression_ratio, frames=1, fps=1, steps=1,
            )  # fmt: skip
            decoded = self._decode_latents(self._pack(latents.to(self.device)), job, generator).float()
            colours = F.avg_pool2d(decoded[:, :, 0], pipe.vae_spatial_compression_ratio)
            colours = colours.permute(0, 2, 3, 1).reshape(-1, 3).cpu().double()
            inputs = latents[:, :, 0].permute(0, 2, 3, 1).reshape(-1, channels).double()
            design = torch.cat([inputs, torch.ones(inputs.shape[0], 1, dtype=torch.float64)], dim=1)
            self._preview_map = torch.linalg.lstsq(design, colours).solution.float()
        return self._preview_map

    @torch.no_grad()
    def preview(self, state: DiffusersState, max_side: int) -> np.ndarray:
        # Wan's preview reads a (1, channels, frames, h, w) video of latents.
        return super().preview(dataclasses.replace(state, latents=self._unpack(state.latents, state.job)), max_side)

    # Checkpoints ------------------------------------------------------------------------

    def load_state(self, job: GenerationJob, data: bytes) -> LTXState:
        state = super().load_state(job, data)
        frames, height, width = self._grid(job)
        pipe = self.pipe
        tokens = (
            frames * height * width // (pipe.transformer_spatial_patch_size**2 * pipe.transformer_temporal_patch_size)
        )
        if state.latents.ndim != 3 or state.latents.shape[:2] != (1, tokens):
            raise ValueError("state does not fit this job (another size or length)")
        if state.condition is not None and tuple(state.condition.shape) != (1, tokens):
            raise ValueError("state does not fit this job (its image mask is another size)")
        prompt_mask, negative_mask = self._masks(job, state.negative_embeds is not None)
        fields = {f.name: getattr(state, f.name) for f in dataclasses.fields(DiffusersState)}
        return LTXState(**fields, prompt_mask=prompt_mask, negative_mask=negative_mask)


class LTXImageToVideoModel(LTXVideoModel):
    """An LTX-Video image-to-video pipeline (``LTXImageToVideoPipeline`` layout) from a catalogue entry."""

    pipeline_class = "LTXImageToVideoPipeline"
    takes_image = True

    def _init_latents(self, state: DiffusersState) -> None:
        job = state.job
        if job.reference is None:
            raise ValueError(f"{self.name} starts from an image: the job has no input_reference")
        pipe = self.pipe
        image = decode_reference(job.reference, job.width, job.height)
        pixels = pipe.video_processor.preprocess(image, height=job.height, width=job.width)
        state.latents, state.condition = self._prepare_latents(
            state, (pixels.to(self.device, dtype=state.prompt_embeds.dtype),), pipe.transformer.config.in_channels
        )

    def _advance(self, state: DiffusersState, noise_pred: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        # The first latent frame is the image: only the others are stepped.
        noise_pred = self._unpack(noise_pred, state.job)
        latents = self._unpack(state.latents, state.job)
        stepped = state.scheduler.step(noise_pred[:, :, 1:], t, latents[:, :, 1:], return_dict=False)[0]
        return self._pack(torch.cat([latents[:, :, :1], stepped], dim=2))
