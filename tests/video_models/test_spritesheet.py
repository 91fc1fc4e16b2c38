"""The spritesheet the GPU worker stores with each video: frames taken evenly across it, in a
near-square grid, deterministic to the byte (a resumed job writes the same file)."""

from __future__ import annotations

import io

import numpy as np
import PIL.Image

from worker_gpu.encoding import encode_spritesheet, spritesheet_grid


def numbered(count: int, height: int, width: int) -> np.ndarray:
    """Frames whose every pixel holds the frame's own number."""
    return np.stack([np.full((height, width, 3), i, np.uint8) for i in range(count)])


def test_frames_are_taken_evenly_and_tiled_in_order() -> None:
    grid = spritesheet_grid(numbered(31, 40, 60))
    # 16 of 31 frames, 4 x 4 tiles of 60 x 40: the first, every second, the last.
    assert grid.shape == (160, 240, 3)
    shown = [int(grid[r * 40 + 20, c * 60 + 30, 0]) for r in range(4) for c in range(4)]
    assert shown == [round(i * 30 / 15) for i in range(16)] and shown[0] == 0 and shown[-1] == 30


def test_few_or_wide_frames_scale_down_and_keep_even_sides() -> None:
    assert spritesheet_grid(numbered(3, 101, 999)).shape == (2 * 26, 2 * 256, 3)  # 2 x 2 grid, one empty
    assert spritesheet_grid(numbered(1, 9, 15)).shape == (10, 16, 3)


def test_the_jpeg_is_the_grid_and_the_same_bytes_every_time() -> None:
    frames = np.random.default_rng(3).integers(0, 255, (12, 48, 64, 3), dtype=np.uint8)
    first = encode_spritesheet(frames)
    assert first == encode_spritesheet(frames.copy())
    image = PIL.Image.open(io.BytesIO(first))
    assert image.format == "JPEG" and image.size == (4 * 64, 3 * 48)
