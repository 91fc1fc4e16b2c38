"""H.264 MP4 and WebP thumbnail encoding with PyAV, deterministic to the byte.

The same frames always give the same file, which is what lets a resumed job produce the
same bytes as an uninterrupted one: x264 runs single-threaded (its output depends on how work
is split across threads) with macroblock-tree rate control off (measured: with it on, sizes
whose chroma rows are padded give different bytes from run to run, as if it read
uninitialised lookahead memory); each frame's row padding is zeroed, since SIMD code reads
past the visible width; and the container is written ``bitexact``, without a creation time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import cast

import av
import numpy as np
from av.video.codeccontext import VideoCodecContext
from av.video.stream import VideoStream

from activities.video.generation import EncodedVideo
from workflows.video.types import SPRITESHEET_NAME

VIDEO_CODEC = "libx264"
THUMBNAIL_CODEC = "libwebp"
SPRITESHEET_CODEC = "mjpeg"
# A spritesheet holds at most this many frames, evenly spaced, in a near-square grid, each at
# most this wide.
SPRITESHEET_TILES = 16
SPRITESHEET_TILE_WIDTH = 256


class H264Encoder:
    """Frames (uint8, frames x height x width x 3) -> ``video.mp4`` and ``thumbnail.webp``."""

    def __init__(self, crf: int = 23, preset: str = "medium") -> None:
        self._crf = crf
        self._preset = preset

    def encode(self, frames: np.ndarray, fps: int, directory: Path, progress: Callable[[], None]) -> EncodedVideo:
        count, height, width, _ = frames.shape
        video_path = directory / "video.mp4"
        with av.open(str(video_path), "w", format="mp4", options={"fflags": "+bitexact"}) as container:
            stream = cast(VideoStream, container.add_stream(VIDEO_CODEC, rate=fps))
            stream.width = width
            stream.height = height
            stream.pix_fmt = "yuv420p"
            stream.options = {
                "crf": str(self._crf),
                "preset": self._preset,
                "threads": "1",
                "x264-params": "threads=1:lookahead-threads=1:sliced-threads=0:mbtree=0",
            }
            for index in range(count):
                rgb = av.VideoFrame.from_ndarray(np.ascontiguousarray(frames[index]), format="rgb24")
                frame = _zero_padding(rgb.reformat(format="yuv420p"))
                frame.pts = index
                container.mux(stream.encode(frame))
                if index % 8 == 0:
                    progress()
            container.mux(stream.encode(None))

        thumbnail_path = directory / "thumbnail.webp"
        thumbnail_path.write_bytes(encode_thumbnail(frames[count // 2]))
        spritesheet_path = directory / SPRITESHEET_NAME
        spritesheet_path.write_bytes(encode_spritesheet(frames))
        return EncodedVideo(
            video_path=video_path,
            video_content_type="video/mp4",
            thumbnail_path=thumbnail_path,
            thumbnail_content_type="image/webp",
            thumbnail_extension="webp",
            frames=count,
            spritesheet_path=spritesheet_path,
        )


def _zero_padding(frame: av.VideoFrame) -> av.VideoFrame:
    """Zero the bytes of each plane outside the picture, so the encoder sees the same input every time."""
    for plane in frame.planes:
        buffer = np.frombuffer(memoryview(plane), dtype=np.uint8)
        rows = buffer.size // plane.line_size
        view = buffer[: rows * plane.line_size].reshape(rows, plane.line_size)
        view[:, plane.width :] = 0
        view[plane.height :, :] = 0
    return frame


def encode_thumbnail(frame: np.ndarray) -> bytes:
    """One RGB frame as a WebP image."""
    height, width, _ = frame.shape
    codec = cast(VideoCodecContext, av.CodecContext.create(THUMBNAIL_CODEC, "w"))
    codec.width = width
    codec.height = height
    codec.pix_fmt = "yuv420p"
    codec.options = {"quality": "85"}
    image = _zero_padding(
        av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24").reformat(format="yuv420p")
    )
    packets = codec.encode(image) + codec.encode(None)
    return b"".join(bytes(p) for p in packets)


def spritesheet_grid(frames: np.ndarray, tiles: int = SPRITESHEET_TILES) -> np.ndarray:
    """Up to ``tiles`` frames evenly spaced across the video, each scaled to at most
    ``SPRITESHEET_TILE_WIDTH`` wide (nearest pixel: cheap and deterministic), in rows of a
    near-square grid; the sides are even (what a 4:2:0 JPEG needs)."""
    count, height, width, _ = frames.shape
    shown = min(tiles, count)
    picked = [round(i * (count - 1) / max(1, shown - 1)) for i in range(shown)]
    tile_w = min(SPRITESHEET_TILE_WIDTH, width)
    tile_h = max(1, round(height * tile_w / width))
    columns = math.ceil(math.sqrt(shown))
    rows = math.ceil(shown / columns)
    ys = (np.arange(tile_h) * height // tile_h).astype(np.intp)
    xs = (np.arange(tile_w) * width // tile_w).astype(np.intp)
    grid = np.zeros((rows * tile_h + (rows * tile_h) % 2, columns * tile_w + (columns * tile_w) % 2, 3), np.uint8)
    for n, index in enumerate(picked):
        r, c = divmod(n, columns)
        grid[r * tile_h : (r + 1) * tile_h, c * tile_w : (c + 1) * tile_w] = frames[index][ys][:, xs]
    return grid


def encode_spritesheet(frames: np.ndarray) -> bytes:
    """The ``spritesheet`` content variant: ``spritesheet_grid`` as one JPEG."""
    grid = spritesheet_grid(frames)
    height, width, _ = grid.shape
    codec = cast(VideoCodecContext, av.CodecContext.create(SPRITESHEET_CODEC, "w"))
    codec.width = width
    codec.height = height
    codec.pix_fmt = "yuvj420p"
    codec.time_base = Fraction(1, 1)
    codec.options = {"qscale": "3"}
    image = _zero_padding(
        av.VideoFrame.from_ndarray(np.ascontiguousarray(grid), format="rgb24").reformat(format="yuvj420p")
    )
    packets = codec.encode(image) + codec.encode(None)
    return b"".join(bytes(p) for p in packets)
