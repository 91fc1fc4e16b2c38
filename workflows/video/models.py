"""The catalogue of video model versions: names, accepted sizes and lengths, fps, sampler steps.

Light on purpose (stdlib only): the API validates requests against it, the workflow and the
generation activity derive frame counts and step counts from it, and the GPU worker checks
that the model it loads is listed. A real diffusion pipeline becomes a new entry here plus a
``VideoModel`` implementation in ``worker_gpu/models/``.
"""

from __future__ import annotations

from dataclasses import dataclass

# The sizes the OpenAI Videos API accepts, then small ones that keep tests and CPU demos cheap.
OPENAI_SIZES: tuple[str, ...] = ("720x1280", "1280x720", "1024x1792", "1792x1024")
SMALL_SIZES: tuple[str, ...] = ("256x256", "320x180", "180x320")

# The OpenAI API offers 4, 8 and 12 seconds; any whole number in range is accepted here.
OPENAI_SECONDS: tuple[int, ...] = (4, 8, 12)

MAX_PROMPT_CHARS = 4000


@dataclass(frozen=True)
class VideoModelSpec:
    """One servable model version and the requests it accepts."""

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
    # GPU memory a job needs per frame x pixel (bytes), measured for each model: a job of F
    # frames of WxH needs F x W x H x this, and goes to the smallest GPU class that holds it
    # (leasehold.gpu_classes). 0: unmeasured, every job fits the smallest class.
    memory_bytes_per_frame_pixel: float = 0.0

    def accepts_size(self, size: str) -> bool:
        return size in self.sizes

    def accepts_seconds(self, seconds: int) -> bool:
        return self.min_seconds <= seconds <= self.max_seconds

    def frame_count(self, seconds: int) -> int:
        """Frames of a ``seconds``-long video."""
        return seconds * self.fps


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
)

MODELS: dict[str, VideoModelSpec] = {spec.name: spec for spec in (PROCEDURAL_V1,)}


def get_model(name: str) -> VideoModelSpec | None:
    """The catalogue entry for ``name``, or ``None`` when no such model version exists."""
    return MODELS.get(name)


def parse_size(size: str) -> tuple[int, int]:
    """``"1280x720"`` -> ``(1280, 720)`` (width, height); raises ``ValueError`` when malformed."""
    width, sep, height = size.partition("x")
    if not sep or not width.isdigit() or not height.isdigit():
        raise ValueError(f"size must look like WIDTHxHEIGHT, got {size!r}")
    return int(width), int(height)


def format_size(width: int, height: int) -> str:
    """``(1280, 720)`` -> ``"1280x720"``."""
    return f"{width}x{height}"
