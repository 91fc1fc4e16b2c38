"""``procedural-v1``: a stand-in video generator with the shape and cost of a real one.

No weights can be downloaded here, so this model is honest about what it is: an ancestral
(DDPM-style, eta = 1) denoising sampler over a latent video tensor of shape
``(frames, 4, ceil(H/8), ceil(W/8))``. Its "clean video" estimate at each step is a scene
derived procedurally from the prompt and seed (a sky/ground gradient and moving coloured
blobs, coloured by colour words in the prompt) plus the output of a 3D-convolutional
denoiser with fixed, seed-initialised weights. The denoiser makes every step cost what a
real one does in proportion to frames x height x width, and adds seed-dependent texture.

Everything a step depends on is in ``ProceduralState``: the latent, the step count and the
sampler's RNG state; a checkpoint is exactly that. Noise comes from a CPU generator, so a
checkpoint resumes on any device, and the ops are deterministic, so a resumed run produces
the same bytes as an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import io
import math
import re
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from activities.video.generation import GenerationJob
from worker_gpu.models.determinism import make_deterministic, resolve_device

LATENT_CHANNELS = 4
LATENT_SCALE = 8
HIDDEN_CHANNELS = 32
# Scales the denoiser's contribution to the clean-video estimate: visible texture, not noise.
DETAIL_STRENGTH = 0.12
_STATE_FORMAT = 1
# Frames a preview shows (evenly spaced over the video).
PREVIEW_FRAMES = 4

# Colour words a prompt can use to steer the palette (RGB in [-1, 1]).
COLOUR_WORDS: dict[str, tuple[float, float, float]] = {
    "red": (0.9, -0.8, -0.8),
    "orange": (0.9, 0.1, -0.9),
    "yellow": (0.9, 0.8, -0.8),
    "green": (-0.7, 0.7, -0.7),
    "blue": (-0.8, -0.4, 0.9),
    "purple": (0.3, -0.7, 0.7),
    "pink": (0.9, -0.1, 0.4),
    "white": (0.9, 0.9, 0.9),
    "black": (-0.9, -0.9, -0.9),
    "gray": (0.0, 0.0, 0.0),
    "sunset": (0.9, -0.1, -0.5),
    "ocean": (-0.9, -0.1, 0.6),
    "forest": (-0.6, 0.3, -0.7),
    "snow": (0.8, 0.85, 0.9),
    "night": (-0.8, -0.8, -0.4),
    "fire": (0.95, -0.3, -0.9),
}


def _seed(*parts: object) -> int:
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)


def _generator(*parts: object) -> torch.Generator:
    gen = torch.Generator(device="cpu")
    gen.manual_seed(_seed(*parts))
    return gen


def _cosine_alpha_bar(steps: int) -> torch.Tensor:
    """``alpha_bar[t]`` for t = 0..steps (float64); 1 at t = 0, near 0 at t = steps."""
    t = torch.arange(steps + 1, dtype=torch.float64) / steps
    f = torch.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
    return (f / f[0]).clamp(min=1e-5, max=1.0)


class _Denoiser(nn.Module):
    """Three 3D convolutions over (channels, frames, height, width); the noise level is an input."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Conv3d(LATENT_CHANNELS + 1, HIDDEN_CHANNELS, 3, padding=1)
        self.mid = nn.Conv3d(HIDDEN_CHANNELS, HIDDEN_CHANNELS, 3, padding=1)
        self.out = nn.Conv3d(HIDDEN_CHANNELS, LATENT_CHANNELS, 3, padding=1)

    def forward(self, latent: torch.Tensor, noise_level: float) -> torch.Tensor:
        # (frames, C, h, w) -> (1, C, frames, h, w)
        x = latent.permute(1, 0, 2, 3).unsqueeze(0)
        level = torch.full_like(x[:, :1], noise_level)
        x = F.silu(self.inp(torch.cat([x, level], dim=1)))
        x = F.silu(self.mid(x))
        x = self.out(x)
        return x.squeeze(0).permute(1, 0, 2, 3)


@dataclass
class ProceduralState:
    """Everything between two steps. ``latent``, ``step`` and ``rng`` are the checkpoint."""

    job: GenerationJob
    step: int
    latent: torch.Tensor
    rng: torch.Generator
    # Derived from the job on init and on restore; not stored.
    scene: torch.Tensor
    alpha_bar: torch.Tensor


class ProceduralVideoModel:
    """The ``procedural-v1`` model; ``load`` once per process, then generate many jobs."""

    name = "procedural-v1"
    revision = "procedural-v1.1"

    def __init__(self, device: str = "auto", threads: int = 1, pace_seconds_per_frame_megapixel: float = 0.0) -> None:
        self.device = resolve_device(device)
        self._threads = threads
        # A step takes at least this x frames x megapixels seconds (0: as fast as it computes):
        # an accelerator's fixed throughput, for fleets larger than the host's cores.
        self._pace = max(0.0, pace_seconds_per_frame_megapixel)
        self._net: _Denoiser | None = None
        # latent-space RGB+texture <-> latent channels: a fixed invertible mix, like a VAE's.
        mix_gen = _generator(self.name, "latent-mix")
        mix = torch.eye(LATENT_CHANNELS) + 0.3 * torch.randn(LATENT_CHANNELS, LATENT_CHANNELS, generator=mix_gen)
        self._mix = mix.to(torch.float32)
        self._unmix = torch.linalg.inv(mix.to(torch.float64)).to(torch.float32)

    def load(self) -> None:
        """Build the denoiser (weights from a fixed seed) on the device, deterministically."""
        make_deterministic(self.device, self._threads)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(_seed(self.name, "denoiser-weights"))
            net = _Denoiser()
        self._net = net.to(self.device).eval()
        self._mix = self._mix.to(self.device)
        self._unmix = self._unmix.to(self.device)

    @property
    def net(self) -> _Denoiser:
        if self._net is None:
            raise RuntimeError("model not loaded: call load() first")
        return self._net

    # The scene the sampler converges to ------------------------------------------------

    def _latent_shape(self, job: GenerationJob) -> tuple[int, int, int, int]:
        h = math.ceil(job.height / LATENT_SCALE)
        w = math.ceil(job.width / LATENT_SCALE)
        return (job.frames, LATENT_CHANNELS, h, w)

    def _scene(self, job: GenerationJob) -> torch.Tensor:
        """The prompt's clean latent video, computed on the CPU in float64, then cast."""
        frames, _c, h, w = self._latent_shape(job)
        words = re.findall(r"[a-z0-9']+", job.prompt.lower())
        prompt_gen = _generator("prompt", " ".join(words))
        palette = [torch.tensor(COLOUR_WORDS[word], dtype=torch.float64) for word in words if word in COLOUR_WORDS]
        while len(palette) < 3:
            palette.append(torch.rand(3, generator=prompt_gen, dtype=torch.float64) * 1.8 - 0.9)
        sky, ground = palette[0] * 0.6, palette[-1] * 0.5
        horizon = 0.35 + 0.3 * float(torch.rand(1, generator=prompt_gen, dtype=torch.float64))

        ys = (torch.arange(h, dtype=torch.float64) + 0.5) / h
        xs = (torch.arange(w, dtype=torch.float64) + 0.5) / w
        yy, xx = torch.meshgrid(ys, xs, indexing="ij")
        blend = torch.sigmoid((yy - horizon) * 12.0)
        background = sky[:, None, None] * (1 - blend) + ground[:, None, None] * blend

        # The seed places and moves the objects; the prompt picks how many and their colours.
        scene_gen = _generator("scene", " ".join(words), job.seed)
        count = 2 + len(words) % 4
        rgb = background.unsqueeze(0).repeat(frames, 1, 1, 1)
        texture = torch.zeros(frames, 1, h, w, dtype=torch.float64)
        t = torch.arange(frames, dtype=torch.float64)[:, None, None] / max(frames - 1, 1)
        for i in range(count):
            start = torch.rand(2, generator=scene_gen, dtype=torch.float64)
            velocity = (torch.rand(2, generator=scene_gen, dtype=torch.float64) - 0.5) * 0.8
            radius = 0.06 + 0.12 * float(torch.rand(1, generator=scene_gen, dtype=torch.float64))
            colour = palette[i % len(palette)]
            cx = (start[0] + velocity[0] * t) % 1.0
            cy = (start[1] + velocity[1] * t) % 1.0
            dist2 = ((xx - cx) * (w / max(h, w))) ** 2 + ((yy - cy) * (h / max(h, w))) ** 2
            mask = torch.exp(-dist2 / (2 * radius**2)).unsqueeze(1)
            rgb = rgb * (1 - mask) + colour[None, :, None, None] * mask
            texture = texture + mask * math.cos(i * 1.7)
        clean = torch.cat([rgb, texture * 0.5], dim=1).to(torch.float32)
        # Into latent channels: (frames, 4, h, w) x mix^T
        return torch.einsum("fchw,dc->fdhw", clean, self._mix.cpu())

    # The model interface ---------------------------------------------------------------

    def init_state(self, job: GenerationJob) -> ProceduralState:
        rng = _generator("noise", self.revision, job.prompt, job.seed, job.width, job.height, job.frames)
        latent = torch.randn(self._latent_shape(job), generator=rng)
        return self._state(job, 0, latent, rng)

    def _state(self, job: GenerationJob, step: int, latent: torch.Tensor, rng: torch.Generator) -> ProceduralState:
        return ProceduralState(
            job=job,
            step=step,
            latent=latent.to(self.device),
            rng=rng,
            scene=self._scene(job).to(self.device),
            alpha_bar=_cosine_alpha_bar(job.steps),
        )

    def step(self, state: ProceduralState) -> None:
        began = time.perf_counter()
        self._step(state)
        if self._pace > 0:
            job = state.job
            floor = self._pace * job.frames * job.width * job.height / 1e6
            rest = floor - (time.perf_counter() - began)
            if rest > 0:
                time.sleep(rest)

    @torch.inference_mode()
    def _step(self, state: ProceduralState) -> None:
        steps = state.job.steps
        t = steps - state.step
        a_t = float(state.alpha_bar[t])
        a_prev = float(state.alpha_bar[t - 1])
        z = state.latent
        detail = torch.tanh(self.net(z, math.sqrt(1 - a_t)))
        x0 = state.scene + DETAIL_STRENGTH * detail
        eps = (z - math.sqrt(a_t) * x0) / math.sqrt(1 - a_t)
        sigma = math.sqrt((1 - a_prev) / (1 - a_t)) * math.sqrt(max(1 - a_t / a_prev, 0.0))
        direction = math.sqrt(max(1 - a_prev - sigma**2, 0.0))
        # Drawn every step, so the RNG state is part of what a checkpoint must carry.
        noise = torch.randn(z.shape, generator=state.rng).to(self.device)
        state.latent = math.sqrt(a_prev) * x0 + direction * eps + sigma * noise
        state.step += 1

    def save_state(self, state: ProceduralState) -> bytes:
        buffer = io.BytesIO()
        torch.save(
            {
                "format": _STATE_FORMAT,
                "revision": self.revision,
                "step": state.step,
                "latent": state.latent.detach().to("cpu").contiguous(),
                "rng": state.rng.get_state(),
            },
            buffer,
        )
        return buffer.getvalue()

    def load_state(self, job: GenerationJob, data: bytes) -> ProceduralState:
        try:
            saved = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises many types for a corrupt file
            raise ValueError(f"not a procedural-v1 state: {exc}") from exc
        if (
            not isinstance(saved, dict)
            or saved.get("format") != _STATE_FORMAT
            or saved.get("revision") != self.revision
        ):
            raise ValueError("state from another model revision")
        latent, step = saved["latent"], int(saved["step"])
        if tuple(latent.shape) != self._latent_shape(job) or not 0 <= step <= job.steps:
            raise ValueError("state does not fit this job")
        rng = torch.Generator(device="cpu")
        rng.set_state(saved["rng"])
        return self._state(job, step, latent, rng)

    @torch.inference_mode()
    def preview(self, state: ProceduralState, max_side: int) -> np.ndarray:
        """A few frames of the current clean-video estimate, long side at most ``max_side``.

        The estimate is the one the next step moves towards (scene plus the denoiser's detail,
        run on the chosen frames only); before the first step and after the last it is the
        latent itself. No RNG is drawn and ``state`` is not touched, so previews never change
        the video's bytes.
        """
        job = state.job
        count = min(PREVIEW_FRAMES, job.frames)
        picks = sorted({round(i * (job.frames - 1) / max(count - 1, 1)) for i in range(count)})
        z = state.latent[picks]
        t = job.steps - state.step
        if 0 < state.step < job.steps:
            a_t = float(state.alpha_bar[t])
            x0 = state.scene[picks] + DETAIL_STRENGTH * torch.tanh(self.net(z, math.sqrt(1 - a_t)))
        else:
            x0 = z
        scale = min(1.0, max_side / max(job.width, job.height))
        width = max(1, min(max_side, int(job.width * scale)))
        height = max(1, min(max_side, int(job.height * scale)))
        clean = torch.einsum("fchw,dc->fdhw", x0, self._unmix)
        rgb = clean[:, :3] + 0.25 * clean[:, 3:4]
        rgb = F.interpolate(rgb, size=(height, width), mode="bilinear", align_corners=False)
        pixels = ((rgb * 0.5 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8)
        return pixels.permute(0, 2, 3, 1).cpu().numpy()

    @torch.inference_mode()
    def decode(self, state: ProceduralState) -> np.ndarray:
        job = state.job
        out = np.empty((job.frames, job.height, job.width, 3), dtype=np.uint8)
        chunk = 8
        for first in range(0, job.frames, chunk):
            latent = state.latent[first : first + chunk]
            clean = torch.einsum("fchw,dc->fdhw", latent, self._unmix)
            rgb = clean[:, :3] + 0.25 * clean[:, 3:4]
            rgb = F.interpolate(rgb, scale_factor=LATENT_SCALE, mode="bilinear", align_corners=False)
            rgb = rgb[:, :, : job.height, : job.width]
            pixels = ((rgb * 0.5 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8)
            out[first : first + chunk] = pixels.permute(0, 2, 3, 1).cpu().numpy()
        return out
