"""The catalogue of video model versions: names, accepted sizes and lengths, fps, sampler steps.

Light on purpose (stdlib only): the API validates requests against it, the generation activity
derives frame and step counts from it, and the GPU worker loads the model an entry names.
Workflows never read it: what they need (the request, resolved) comes through their inputs.

The catalogue is configuration, not code: each process loads it once at start-up
(``workflows.video.catalogue.load_catalogue``, from ``Settings.model_catalogue``) and installs
it with ``use_catalogue``. Without a file it is the embedded default: the stand-in
``procedural-v1`` alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# The sizes the OpenAI Videos API accepts, then small ones that keep tests and CPU demos cheap.
OPENAI_SIZES: tuple[str, ...] = ("720x1280", "1280x720", "1024x1792", "1792x1024")
SMALL_SIZES: tuple[str, ...] = ("256x256", "320x180", "180x320")

# The OpenAI API offers 4, 8 and 12 seconds; any whole number in range is accepted here.
OPENAI_SECONDS: tuple[int, ...] = (4, 8, 12)

MAX_PROMPT_CHARS = 4000

# Pipeline families a catalogue entry may name. ``procedural``: the built-in stand-in;
# ``wan``: Wan 2.1 text-to-video through diffusers (worker_gpu/models/diffusers_video.py);
# ``wan-i2v``: Wan 2.1 image-to-video (worker_gpu/models/wan_i2v.py); ``wan-v2v``: Wan 2.1
# text-to-video whose remixes run video-to-video (worker_gpu/models/wan_v2v.py); ``ltx`` and
# ``ltx-i2v``: LTX-Video text- and image-to-video (worker_gpu/models/ltx_video.py).
FAMILIES: tuple[str, ...] = ("procedural", "wan", "wan-i2v", "wan-v2v", "ltx", "ltx-i2v")
# Families whose jobs start from an image (``input_reference``): they need one, the others refuse one.
IMAGE_FAMILIES: frozenset[str] = frozenset({"wan-i2v", "ltx-i2v"})
# Families that remix a finished video (``POST /v1/videos/{id}/remix``); the others refuse a remix.
REMIX_FAMILIES: frozenset[str] = frozenset({"wan-v2v"})
DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
SCHEDULERS: tuple[str, ...] = ("pipeline", "unipc", "flow-euler")


@dataclass(frozen=True)
class VideoModelSpec:
    """One servable model version: the requests it accepts and how a GPU worker loads it."""

    name: str
    description: str
    sizes: tuple[str, ...]
    min_seconds: int
    max_seconds: int
    default_seconds: int
    default_size: str
    fps: int
    # Sampler steps per job unless a request asks for another count (tests do, to run longer).
    default_steps: int
    max_steps: int
    # Which implementation loads it (one of FAMILIES).
    family: str = "procedural"
    # Local weights in the pipeline's on-disk layout (``model_index.json`` at the top), or a
    # hub id resolved from the local Hugging Face cache only (``allow_download`` lets the
    # worker fetch it once at start-up). Never shown to API clients.
    weights: str | None = None
    hub_id: str | None = None
    allow_download: bool = False
    dtype: str = "float32"
    # Denoising schedule: the pipeline's own, or an override.
    scheduler: str = "pipeline"
    guidance_scale: float = 5.0
    negative_prompt: str = ""
    # Remix (video-to-video): how far the source video is noised before denoising, 0 < x <= 1
    # (the pipeline's ``strength``: 1 ignores the source, small values keep it).
    remix_strength: float = 0.8
    # Frames are ``k * frame_multiple + 1`` when > 1 (the VAE's temporal compression).
    frame_multiple: int = 1
    # Checkpoints made by another version are refused; change it when the weights change.
    version: str = ""
    # The least GPU memory (GiB) a worker must have to load this model.
    min_gpu_memory_gib: float = 0.0
    # GPU memory a job needs per frame x pixel (bytes), measured for each model: a job of F
    # frames of WxH needs F x W x H x this, and goes to the smallest GPU class that holds it
    # (leasehold.gpu_classes). 0: unmeasured, every job fits the smallest class.
    memory_bytes_per_frame_pixel: float = 0.0
    # /v1/models: when the entry was published (Unix seconds) and by whom.
    created: int = 0
    owned_by: str = "leasehold"

    @property
    def takes_image(self) -> bool:
        """Whether jobs of this model start from an image (``input_reference``, required)."""
        return self.family in IMAGE_FAMILIES

    @property
    def remixes(self) -> bool:
        """Whether this model remixes a finished video (video-to-video from a new prompt)."""
        return self.family in REMIX_FAMILIES

    def accepts_size(self, size: str) -> bool:
        return size in self.sizes

    def accepts_seconds(self, seconds: int) -> bool:
        return self.min_seconds <= seconds <= self.max_seconds

    def frame_count(self, seconds: int) -> int:
        """Frames of a ``seconds``-long video (rounded to what the model's VAE takes)."""
        frames = seconds * self.fps
        if self.frame_multiple > 1:
            return max(1, round((frames - 1) / self.frame_multiple)) * self.frame_multiple + 1
        return frames

    @property
    def model_version(self) -> str:
        """What checkpoints are stamped with."""
        return self.version or self.name


PROCEDURAL_V1 = VideoModelSpec(
    name="procedural-v1",
    description=(
        "Stand-in generator: an ancestral denoising sampler over a latent video whose scene is "
        "procedurally derived from the prompt and seed, with a randomly initialised 3D-conv "
        "denoiser that gives it the cost profile of a real model."
    ),
    sizes=OPENAI_SIZES + SMALL_SIZES,
    min_seconds=1,
    max_seconds=12,
    default_seconds=4,
    default_size="720x1280",
    fps=8,
    default_steps=50,
    max_steps=1000,
    # Measured on CPU (peak RSS growth of init, steps and decode of one job): 13-17 bytes per
    # frame-pixel between 0.5 and 8.4 M frame-pixels, most of it the decoded RGB video.
    memory_bytes_per_frame_pixel=16.0,
    created=1767225600,  # 2026-01-01
)

# The embedded default, when no catalogue file is configured.
DEFAULT_CATALOGUE: Mapping[str, VideoModelSpec] = {PROCEDURAL_V1.name: PROCEDURAL_V1}

_active: dict[str, VideoModelSpec] = dict(DEFAULT_CATALOGUE)


def use_catalogue(models: Mapping[str, VideoModelSpec]) -> None:
    """Install the process's catalogue (once, at start-up, before anything asks for a model)."""
    _active.clear()
    _active.update(models)


def get_model(name: str) -> VideoModelSpec | None:
    """The catalogue entry for ``name``, or ``None`` when no such model version exists."""
    return _active.get(name)


def parse_size(size: str) -> tuple[int, int]:
    """``"1280x720"`` -> ``(1280, 720)`` (width, height); raises ``ValueError`` when malformed."""
    width, sep, height = size.partition("x")
    if not sep or not width.isdigit() or not height.isdigit():
        raise ValueError(f"size must look like WIDTHxHEIGHT, got {size!r}")
    return int(width), int(height)


def format_size(width: int, height: int) -> str:
    """``(1280, 720)`` -> ``"1280x720"``."""
    return f"{width}x{height}"
