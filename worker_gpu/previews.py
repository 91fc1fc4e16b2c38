"""Preview images: a model's preview frames as one small WebP, the frames side by side."""

from __future__ import annotations

import numpy as np

from activities.video.generation import EncodedPreview
from worker_gpu.encoding import encode_thumbnail

# A thin dark gap between frames, so the strip reads as separate moments.
GAP_PIXELS = 2


class WebPStripEncoder:
    """Frames (uint8, n x h x w x 3) -> one WebP: the frames left to right, even-sized."""

    def encode_preview(self, frames: np.ndarray) -> EncodedPreview:
        count, height, width, _ = frames.shape
        strip_width = count * width + (count - 1) * GAP_PIXELS
        # yuv420p halves chroma: even sides keep the last row and column intact.
        strip = np.zeros((height + height % 2, strip_width + strip_width % 2, 3), dtype=np.uint8)
        for index in range(count):
            left = index * (width + GAP_PIXELS)
            strip[:height, left : left + width] = frames[index]
        return EncodedPreview(data=encode_thumbnail(strip), content_type="image/webp", extension="webp")
