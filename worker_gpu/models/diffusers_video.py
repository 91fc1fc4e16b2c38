"""Text-to-video models from ``diffusers`` (Wan 2.1), one denoising step at a time.

``WanPipeline.__call__`` runs the whole sampling loop and cannot start mid-way, so this
module writes the loop against the pipeline's components, exactly as ``__call__`` does:
encode the prompt (and the negative prompt, for classifier-free guidance), ``set_timesteps``,
draw the initial latents from the job's seed, then per step the guided pair of transformer
calls and ``scheduler.step``; at the end un-normalise the latents, ``vae.decode`` and
post-process. One ``step`` is one denoising step, and the state between two steps is all the
next step reads:

* the latents, the step index, the prompt and negative embeddings, the guidance scale;
* the CPU generator's state (the initial noise comes from it; schedulers that draw noise
  per step draw from it too);
* the scheduler's run-time attributes: the step and begin index, and for UniPC its multistep
  history (``model_outputs``, ``timestep_list``, ``last_sample``, ``lower_order_nums``,
  ``this_order``) — without it a resumed run drifts by up to 5e-2. ``set_timesteps`` rebuilds
  the rest (sigmas, timesteps) from the step count.

``save_state`` writes that as one safetensors file whose metadata carries the model version,
dtype and device kind; ``load_state`` refuses another version or dtype. On the same device
kind and dtype a resumed run gives the same bytes as an uninterrupted one: the loop runs
under ``no_grad`` with fixed thread count and deterministic kernels, weights are copied out
of the memory-mapped safetensors files (unaligned addresses round differently), and every
process loads the same way. Across device kinds a checkpoint still resumes, but not byte for
byte (other kernels).

``WanImageToVideoModel`` (``worker_gpu.models.wan_i2v``) is this loop with an image's
conditioning added; the state's optional tensors (``condition``, ``image_embeds``) are its.
``WanVideoToVideoModel`` (``worker_gpu.models.wan_v2v``) starts a remix's loop part-way down
the schedule (``DiffusersState.offset``) from the source video's noised latents.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from activities.video.generation import GenerationJob
from worker_gpu.models.determinism import make_deterministic, resolve_device
from workflows.video.models import VideoModelSpec

log = logging.getLogger(__name__)

_STATE_FORMAT = "leasehold-diffusers-state/1"
# Longest prompt the text encoder sees (tokens), as WanPipeline's default.
MAX_SEQUENCE_LENGTH = 512
# Scheduler attributes that change while sampling (all others follow from set_timesteps).
_SCHEDULER_RUNTIME = (
    "_step_index",
    "_begin_index",
    "model_outputs",
    "timestep_list",
    "last_sample",
    "lower_order_nums",
    "this_order",
)
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def weights_folder(spec: VideoModelSpec) -> Path:
    """The local folder of ``spec``'s weights; a hub id resolves from the local cache only,
    unless the catalogue entry allows a download."""
    if spec.weights is not None:
        folder = Path(spec.weights)
    elif spec.hub_id is not None:
        from huggingface_hub import snapshot_download

        try:
            folder = Path(snapshot_download(spec.hub_id, local_files_only=not spec.allow_download))
        except Exception as exc:  # the hub library raises several types for "not cached"
            raise FileNotFoundError(
                f"model {spec.name}: {spec.hub_id} is not in the local Hugging Face cache "
                "(download it first, or set allow_download = true in the catalogue entry)"
            ) from exc
    else:
        raise FileNotFoundError(f"model {spec.name}: no weights or hub_id in the catalogue entry")
    if not (folder / "model_index.json").is_file():
        raise FileNotFoundError(f"model {spec.name}: {folder} holds no model_index.json (a diffusers pipeline folder)")
    return folder


def weights_digest(folder: Path) -> str:
    """A short hash of the pipeline's configs and weight file sizes: a new download or another
    checkpoint of the weights changes it, so old checkpoints are refused."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        relative = path.relative_to(folder).as_posix()
        digest.update(relative.encode() + b"\0")
        if path.suffix == ".json":
            digest.update(path.read_bytes())
        else:
            digest.update(str(path.stat().st_size).encode())
    return digest.hexdigest()[:12]


@dataclass
class DiffusersState:
    """Everything between two steps; ``save_state`` writes all of it but ``job``."""

    job: GenerationJob
    step: int
    latents: torch.Tensor
    prompt_embeds: torch.Tensor
    negative_embeds: torch.Tensor | None
    guidance_scale: float
    generator: torch.Generator
    scheduler: Any
    # Image-to-video (``worker_gpu.models.wan_i2v``): the mask and image latents the transformer
    # reads beside the noisy latents, and the image's CLIP embedding; ``None`` for text-to-video.
    condition: torch.Tensor | None = None
    image_embeds: torch.Tensor | None = None
    # Video-to-video (``worker_gpu.models.wan_v2v``): the schedule index of step 0 (the noisiest
    # steps are skipped); derived from the job, so not saved. 0 for every other job.
    offset: int = 0


# Tensors of a state that only some jobs have (saved when present).
_OPTIONAL_TENSORS = ("negative_embeds", "condition", "image_embeds")


class WanVideoModel:
    """A Wan 2.1 text-to-video pipeline from a catalogue entry; ``load`` once, then many jobs."""

    # The diffusers pipeline class the weights folder holds, and whether its jobs start from an
    # image (a subclass loads another).
    pipeline_class = "WanPipeline"
    takes_image = False

    def __init__(
        self,
        spec: VideoModelSpec,
        device: str = "auto",
        threads: int = 1,
        pace_seconds_per_frame_megapixel: float = 0.0,
    ) -> None:
        self._check_spec(spec)
        self.spec = spec
        # As the stand-in's: a floor on each step's time (tests and benchmarks that need a job
        # to last on a fast host); it changes no bytes.
        self._pace = max(0.0, pace_seconds_per_frame_megapixel)
        self.name = spec.name
        self.device = resolve_device(device)
        self.dtype = _DTYPES[spec.dtype]
        self._threads = threads
        self.revision = spec.version or spec.name
        self._pipe: Any = None
        self._preview_map: torch.Tensor | None = None

    def _check_spec(self, spec: VideoModelSpec) -> None:
        """Refuse, before anything is set up, a catalogue entry this pipeline cannot run (a
        subclass's constraint; Wan runs every entry that validates)."""

    # Loading ---------------------------------------------------------------------------

    def load(self) -> None:
        """Load the pipeline's components from local files onto the device, deterministically."""
        import diffusers
        from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler
        from diffusers.utils import logging as diffusers_logging

        # Worker logs are structured lines, not progress bars.
        diffusers_logging.disable_progress_bar()

        make_deterministic(self.device, self._threads, warn_only=True)
        folder = weights_folder(self.spec)
        if not self.spec.version:
            self.revision = f"{self.spec.name}@{weights_digest(folder)}"
        pipeline = getattr(diffusers, self.pipeline_class)
        pipe = pipeline.from_pretrained(str(folder), dtype=self.dtype, local_files_only=True)
        if self.spec.scheduler == "unipc":
            pipe.scheduler = UniPCMultistepScheduler.from_config(
                pipe.scheduler.config, prediction_type="flow_prediction", use_flow_sigmas=True
            )
        elif self.spec.scheduler == "flow-euler":
            pipe.scheduler = FlowMatchEulerDiscreteScheduler.from_config(pipe.scheduler.config)
        modules = [pipe.text_encoder, pipe.transformer, pipe.vae, getattr(pipe, "image_encoder", None)]
        for module in (m for m in modules if m is not None):
            module.eval().requires_grad_(False)
            if self.device.type == "cpu":
                # Safetensors weights are memory-mapped at unaligned addresses, where the CPU
                # matmul rounds differently than for an in-memory copy: copy them, so every
                # process computes on the same layout.
                for tensor in [*module.parameters(), *module.buffers()]:
                    tensor.data = tensor.data.clone()
        pipe.set_progress_bar_config(disable=True)
        self._pipe = pipe.to(self.device)
        log.info("loaded %s (%s, %s) from %s on %s", self.name, self.revision, self.spec.dtype, folder, self.device)

    @property
    def pipe(self) -> Any:
        if self._pipe is None:
            raise RuntimeError("model not loaded: call load() first")
        return self._pipe

    def _schedule(self, job: GenerationJob) -> tuple[int, int]:
        """The schedule's length and the index of the job's first step in it (a remix starts
        part-way down; a subclass says how far)."""
        return job.steps, 0

    def _scheduler(self, job: GenerationJob) -> Any:
        # A scheduler of its own per job: it holds the job's run-time state.
        length, offset = self._schedule(job)
        scheduler = type(self.pipe.scheduler).from_config(self.pipe.scheduler.config)
        scheduler.set_timesteps(length, device=self.device)
        scheduler.set_begin_index(offset * scheduler.order)
        return scheduler

    def _check_job(self, job: GenerationJob) -> None:
        pipe = self.pipe
        multiple = pipe.vae_scale_factor_spatial * pipe.transformer.config.patch_size[1]
        if job.width % multiple or job.height % multiple:
            raise ValueError(f"width and height must be multiples of {multiple} for {self.name}")
        if (job.frames - 1) % pipe.vae_scale_factor_temporal:
            raise ValueError(f"frames must be k x {pipe.vae_scale_factor_temporal} + 1 for {self.name}")

    def _prompt_encoder(self) -> Any:
        """The pipeline whose ``encode_prompt`` encodes the job's prompt (a subclass may lend one)."""
        return self.pipe

    # The model interface ---------------------------------------------------------------

    @torch.no_grad()
    def init_state(self, job: GenerationJob) -> DiffusersState:
        self._check_job(job)
        pipe = self.pipe
        guidance = self.spec.guidance_scale
        prompt_embeds, negative_embeds = self._prompt_encoder().encode_prompt(
            prompt=job.prompt,
            negative_prompt=self.spec.negative_prompt,
            do_classifier_free_guidance=guidance > 1.0,
            max_sequence_length=MAX_SEQUENCE_LENGTH,
            device=self.device,
        )
        state = DiffusersState(
            job=job,
            step=0,
            latents=torch.empty(0),
            prompt_embeds=prompt_embeds.to(pipe.transformer.dtype),
            negative_embeds=None if negative_embeds is None else negative_embeds.to(pipe.transformer.dtype),
            guidance_scale=guidance,
            generator=torch.Generator(device="cpu").manual_seed(job.seed),
            scheduler=self._scheduler(job),
            offset=self._schedule(job)[1],
        )
        self._init_latents(state)
        return state

    def _init_latents(self, state: DiffusersState) -> None:
        """The initial noise, drawn from the job's generator (a subclass adds its conditioning)."""
        state.latents = self._prepare_latents(state, (), self.pipe.transformer.config.in_channels)

    def _prepare_latents(self, state: DiffusersState, leading: tuple[Any, ...], channels: int) -> Any:
        """``pipe.prepare_latents`` for the job: ``leading`` arguments (the image-to-video
        pipeline's image), then one video of ``channels`` latent channels of the job's size and
        frames, in float32 on the device, from the job's generator."""
        job = state.job
        return self.pipe.prepare_latents(
            *leading, 1, channels, job.height, job.width, job.frames, torch.float32, self.device, state.generator
        )

    @torch.no_grad()
    def step(self, state: DiffusersState) -> None:
        began = time.perf_counter()
        self._step(state)
        if self._pace > 0:
            job = state.job
            rest = self._pace * job.frames * job.width * job.height / 1e6 - (time.perf_counter() - began)
            if rest > 0:
                time.sleep(rest)

    def _step(self, state: DiffusersState) -> None:
        transformer = self.pipe.transformer
        t = state.scheduler.timesteps[state.offset * state.scheduler.order + state.step]
        latents_in = state.latents
        extra_inputs: dict[str, Any] = {}
        if state.condition is not None:
            # Image-to-video: the image's mask and latents ride along as extra channels.
            latents_in = torch.cat([state.latents, state.condition], dim=1)
            extra_inputs["encoder_hidden_states_image"] = state.image_embeds
        latents_in = latents_in.to(transformer.dtype)
        timestep = t.expand(state.latents.shape[0])

        def predict(embeds: torch.Tensor) -> torch.Tensor:
            inputs = {"hidden_states": latents_in, "timestep": timestep, "encoder_hidden_states": embeds}
            return transformer(**inputs, **extra_inputs, return_dict=False)[0]

        noise_pred = predict(state.prompt_embeds)
        if state.negative_embeds is not None:
            noise_uncond = predict(state.negative_embeds)
            noise_pred = noise_uncond + state.guidance_scale * (noise_pred - noise_uncond)
        # Schedulers that draw noise per step (stochastic sampling) take the job's generator.
        extra = (
            {"generator": state.generator} if "generator" in inspect.signature(state.scheduler.step).parameters else {}
        )
        state.latents = state.scheduler.step(noise_pred, t, state.latents, return_dict=False, **extra)[0]
        state.step += 1

    def _denormalised(self, latents: torch.Tensor) -> torch.Tensor:
        vae = self.pipe.vae
        latents = latents.to(self.device, dtype=vae.dtype)
        mean = (
            torch.tensor(vae.config.latents_mean).view(1, vae.config.z_dim, 1, 1, 1).to(latents.device, latents.dtype)
        )
        std = 1.0 / torch.tensor(vae.config.latents_std).view(1, vae.config.z_dim, 1, 1, 1).to(
            latents.device, latents.dtype
        )
        return latents / std + mean

    @torch.no_grad()
    def decode(self, state: DiffusersState) -> np.ndarray:
        pipe = self.pipe
        video = pipe.vae.decode(self._denormalised(state.latents), return_dict=False)[0]
        frames = pipe.video_processor.postprocess_video(video, output_type="np")[0]
        return np.clip(np.round(np.asarray(frames, dtype=np.float32) * 255.0), 0, 255).astype(np.uint8)

    # Previews --------------------------------------------------------------------------

    @torch.no_grad()
    def _latent_to_rgb(self) -> torch.Tensor:
        """A fixed (z_dim + 1) x 3 linear map from a latent pixel to its RGB colour, fitted once
        by least squares on what the VAE decodes from random latents (a seeded, tiny decode)."""
        if self._preview_map is None:
            vae = self.pipe.vae
            z_dim = vae.config.z_dim
            generator = torch.Generator(device="cpu").manual_seed(0)
            latents = torch.randn((4, z_dim, 1, 4, 4), generator=generator)
            decoded = vae.decode(self._denormalised(latents), return_dict=False)[0].float()
            scale = self.pipe.vae_scale_factor_spatial
            # One colour per latent pixel: the mean of the pixels it decodes to, in [-1, 1].
            colours = F.avg_pool2d(decoded[:, :, 0], scale).permute(0, 2, 3, 1).reshape(-1, 3)
            inputs = latents[:, :, 0].permute(0, 2, 3, 1).reshape(-1, z_dim).to(colours.device)
            design = torch.cat([inputs, torch.ones(inputs.shape[0], 1, device=inputs.device)], dim=1)
            self._preview_map = torch.linalg.lstsq(design.cpu().double(), colours.cpu().double()).solution.float()
        return self._preview_map

    @torch.no_grad()
    def preview(self, state: DiffusersState, max_side: int) -> np.ndarray:
        """A cheap low-resolution look at the video so far: up to four latent frames through a
        fixed linear latent->RGB map, long side at most ``max_side``."""
        job = state.job
        mapping = self._latent_to_rgb()
        latents = state.latents[0].float().cpu()  # (channels, latent frames, h, w)
        count = latents.shape[1]
        picks = sorted({round(i * (count - 1) / 3) for i in range(4)}) if count > 1 else [0]
        pixels = latents[:, picks].permute(1, 2, 3, 0)  # (n, h, w, channels)
        design = torch.cat([pixels, torch.ones(*pixels.shape[:-1], 1)], dim=-1)
        rgb = (design @ mapping).permute(0, 3, 1, 2)  # (n, 3, h, w) in about [-1, 1]
        scale = min(1.0, max_side / max(job.width, job.height))
        height = max(1, math.floor(job.height * scale))
        width = max(1, math.floor(job.width * scale))
        rgb = F.interpolate(rgb, size=(height, width), mode="bilinear", align_corners=False)
        out = ((rgb * 0.5 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8)
        return out.permute(0, 2, 3, 1).numpy()

    # Checkpoints -----------------------------------------------------------------------

    def save_state(self, state: DiffusersState) -> bytes:
        from safetensors.torch import save

        tensors: dict[str, torch.Tensor] = {
            "latents": state.latents.detach().to("cpu").contiguous(),
            "prompt_embeds": state.prompt_embeds.detach().to("cpu").contiguous(),
            "generator": state.generator.get_state(),
        }
        for name in _OPTIONAL_TENSORS:
            value = getattr(state, name)
            if value is not None:
                tensors[name] = value.detach().to("cpu").contiguous()
        scheduler: dict[str, Any] = {}
        for attr in _SCHEDULER_RUNTIME:
            if hasattr(state.scheduler, attr):
                scheduler[attr] = _encode_value(getattr(state.scheduler, attr), f"scheduler.{attr}", tensors)
        metadata = {
            "format": _STATE_FORMAT,
            "model_version": self.revision,
            "dtype": self.spec.dtype,
            "device_kind": self.device.type,
            "step": str(state.step),
            "guidance_scale": repr(state.guidance_scale),
            "scheduler_class": type(state.scheduler).__name__,
            "scheduler": json.dumps(scheduler, sort_keys=True),
        }
        return bytes(save(tensors, metadata=metadata))

    def load_state(self, job: GenerationJob, data: bytes) -> DiffusersState:
        from safetensors.torch import load

        try:
            tensors = load(data)
            metadata = _metadata(data)
        except Exception as exc:  # safetensors raises several types for a corrupt file
            raise ValueError(f"not a {self.name} state: {exc}") from exc
        if metadata.get("format") != _STATE_FORMAT:
            raise ValueError("not a diffusers model state")
        if metadata.get("model_version") != self.revision:
            raise ValueError(f"state of model version {metadata.get('model_version')!r}, not {self.revision!r}")
        if metadata.get("dtype") != self.spec.dtype:
            raise ValueError(f"state made in {metadata.get('dtype')}, this model runs in {self.spec.dtype}")
        if metadata.get("device_kind") != self.device.type:
            log.warning(
                "resuming a %s checkpoint on %s: the result will not be byte-identical",
                metadata.get("device_kind"),
                self.device.type,
            )
        self._check_job(job)
        step = int(metadata["step"])
        if job.steps < 1 or not 0 <= step <= job.steps:
            raise ValueError("state does not fit this job")
        fresh_scheduler = self._scheduler(job)
        if type(fresh_scheduler).__name__ != metadata.get("scheduler_class"):
            raise ValueError("state does not fit this job (another scheduler)")
        for attr, encoded in json.loads(metadata["scheduler"]).items():
            setattr(fresh_scheduler, attr, _decode_value(encoded, tensors, self.device))
        generator = torch.Generator(device="cpu")
        generator.set_state(tensors["generator"])
        optional = {name: tensors[name].to(self.device) if name in tensors else None for name in _OPTIONAL_TENSORS}
        state = DiffusersState(
            job=job,
            step=step,
            latents=tensors["latents"].to(self.device),
            prompt_embeds=tensors["prompt_embeds"].to(self.device),
            guidance_scale=float(metadata["guidance_scale"]),
            generator=generator,
            scheduler=fresh_scheduler,
            offset=self._schedule(job)[1],
            **optional,
        )
        if (state.condition is not None) != self.takes_image:
            raise ValueError("state does not fit this job (text-to-video and image-to-video states differ)")
        return state


def _metadata(data: bytes) -> dict[str, str]:
    """The metadata of a safetensors file held in memory (its loader returns tensors only)."""
    # The format: an 8-byte little-endian header length, then the JSON header.
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    metadata = header.get("__metadata__") or {}
    if not isinstance(metadata, dict):
        raise ValueError("bad metadata")
    return {str(k): str(v) for k, v in metadata.items()}


def _encode_value(value: Any, key: str, tensors: dict[str, torch.Tensor]) -> Any:
    """A scheduler attribute as JSON; tensors go into ``tensors`` under ``key``."""
    if value is None or isinstance(value, bool | int | float | str):
        return {"v": value}
    if isinstance(value, torch.Tensor):
        tensors[key] = value.detach().to("cpu").contiguous()
        return {"t": key}
    if isinstance(value, list | tuple):
        return {"l": [_encode_value(item, f"{key}.{i}", tensors) for i, item in enumerate(value)]}
    raise TypeError(f"cannot checkpoint scheduler attribute {key} of type {type(value).__name__}")


def _decode_value(encoded: Any, tensors: dict[str, torch.Tensor], device: torch.device) -> Any:
    if "v" in encoded:
        return encoded["v"]
    if "t" in encoded:
        return tensors[encoded["t"]].to(device)
    return [_decode_value(item, tensors, device) for item in encoded["l"]]
