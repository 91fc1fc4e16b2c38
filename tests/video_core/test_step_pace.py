"""The stand-in model's step pace (``video_step_pace_seconds_per_frame_megapixel``): a paced
step takes at least its floor and computes exactly what an unpaced one does."""

from __future__ import annotations

import time

import torch

from activities.video.generation import GenerationJob
from worker_gpu.models.procedural import ProceduralVideoModel

JOB = GenerationJob(
    model="procedural-v1", prompt="a paced kite", seed=5, width=180, height=320, frames=8, fps=8, steps=4
)


def test_paced_steps_take_their_floor_and_compute_the_same() -> None:
    pace = 0.5  # 8 frames x 0.0576 MP x 0.5 s = 0.23 s a step
    floor = pace * JOB.frames * JOB.width * JOB.height / 1e6
    paced = ProceduralVideoModel(device="cpu", threads=1, pace_seconds_per_frame_megapixel=pace)
    plain = ProceduralVideoModel(device="cpu", threads=1)
    paced.load()
    plain.load()
    a, b = paced.init_state(JOB), plain.init_state(JOB)
    for _ in range(2):
        began = time.perf_counter()
        paced.step(a)
        assert time.perf_counter() - began >= floor
        plain.step(b)
    assert a.step == b.step == 2
    assert torch.equal(a.latent, b.latent)
