"""``python -m bench.gpu``: the diffusers video family on this machine's accelerator.

On CUDA it runs the tiny random-weight Wan pipeline and, for every ``wan`` entry of the model
catalogue (``LEASEHOLD_MODEL_CATALOGUE``) whose weights are on disk, the real one at 480p and
720p for a few steps. For each it prints steps per second, checkpoint write and restore time
and size, peak memory, and whether a resume from a mid-run checkpoint gives the same bytes as
an uninterrupted run on the same device. Without CUDA it runs the tiny pipeline on the CPU and
says so. Never asserts timings; a run takes well under ten minutes.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from activities.video.generation import GenerationJob
from workflows.video.catalogue import load_catalogue, parse_catalogue
from workflows.video.models import VideoModelSpec

# Real weights: (label, width, height, steps) runs, few steps each (the cost of one step is
# what matters; a full 50-step 720p video takes many minutes even on a large GPU).
REAL_RUNS = (("480p", 832, 480, 4), ("720p", 1280, 720, 4))
TINY_RUNS = (("tiny 64x64", 64, 64, 20), ("tiny 256x256", 256, 256, 10))


@dataclasses.dataclass
class Row:
    model: str
    run: str
    device: str
    frames: int
    steps: int
    steps_per_second: float
    checkpoint_write_ms: float
    checkpoint_restore_ms: float
    checkpoint_bytes: int
    peak_memory_mib: float
    resume_identical: bool

    def line(self) -> str:
        return (
            f"| {self.model} | {self.run} | {self.device} | {self.frames} | {self.steps} | "
            f"{self.steps_per_second:.2f} | {self.checkpoint_write_ms:.1f} | {self.checkpoint_restore_ms:.1f} | "
            f"{self.checkpoint_bytes / 1024:.0f} KiB | {self.peak_memory_mib:.0f} | "
            f"{'yes' if self.resume_identical else 'NO'} |"
        )


HEADER = (
    "| model | run | device | frames | steps | steps/s | checkpoint write ms | checkpoint restore ms | "
    "checkpoint size | peak memory MiB | resume byte-identical |\n|---|---|---|---|---|---|---|---|---|---|---|"
)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _peak_mib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    # The process's peak resident set (KiB on Linux): weights, activations and the interpreter.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(spec: VideoModelSpec, label: str, width: int, height: int, steps: int, device: str) -> Row:
    from worker_gpu.models.diffusers_video import WanVideoModel

    model = WanVideoModel(spec, device=device, threads=int(os.environ.get("LEASEHOLD_VIDEO_TORCH_THREADS", "1")))
    model.load()
    job = GenerationJob(
        model=spec.name, prompt="a red kite over the sea at dusk", seed=7, width=width, height=height,
        frames=spec.frame_count(spec.default_seconds), fps=spec.fps, steps=steps,
    )  # fmt: skip
    if model.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()

    state = model.init_state(job)
    _sync(model.device)
    started = time.perf_counter()
    half = steps // 2
    saved = b""
    while state.step < steps:
        model.step(state)
        if state.step == half:
            _sync(model.device)
            paused = time.perf_counter()
            saved = model.save_state(state)
            write_ms = (time.perf_counter() - paused) * 1000
            started += time.perf_counter() - paused  # the checkpoint is not a step
    _sync(model.device)
    steps_per_second = steps / (time.perf_counter() - started)
    uninterrupted = model.decode(state)
    peak = _peak_mib(model.device)

    restore_started = time.perf_counter()
    resumed = model.load_state(job, saved)
    _sync(model.device)
    restore_ms = (time.perf_counter() - restore_started) * 1000
    while resumed.step < steps:
        model.step(resumed)
    identical = bool(np.array_equal(model.decode(resumed), uninterrupted))
    return Row(
        spec.name, label, str(model.device), job.frames, steps, steps_per_second, write_ms, restore_ms,
        len(saved), peak, identical,
    )  # fmt: skip


def tiny_spec(folder: Path, dtype: str) -> VideoModelSpec:
    import tomllib

    from worker_gpu.models.tiny_wan import build_tiny_wan, tiny_catalogue_entry

    build_tiny_wan(folder)
    entry = tiny_catalogue_entry("wan-tiny", folder, dtype=dtype, sizes=["64x64", "256x256"], default_size="64x64")
    return parse_catalogue(tomllib.loads(entry), folder / "catalogue.toml")["wan-tiny"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__)
    parser.add_argument("--catalogue", type=Path, default=os.environ.get("LEASEHOLD_MODEL_CATALOGUE"))
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    if cuda:
        print(f"device: CUDA, {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    else:
        print(f"device: CPU only (no CUDA here), torch {torch.__version__}: the tiny pipeline only, on the CPU")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="leasehold-bench-gpu-") as tmp:
        spec = tiny_spec(Path(tmp) / "wan-tiny", "float32")
        for label, width, height, steps in TINY_RUNS:
            rows.append(measure(spec, label, width, height, steps, device))
            print(rows[-1].line(), flush=True)
    skipped: list[str] = []
    if args.catalogue:
        for name, entry in load_catalogue(Path(args.catalogue)).items():
            if entry.family != "wan":
                continue
            if not cuda:
                skipped.append(f"{name}: real weights are measured on CUDA only")
                continue
            for label, width, height, steps in REAL_RUNS:
                try:
                    rows.append(measure(entry, label, width, height, steps, device))
                    print(rows[-1].line(), flush=True)
                except (FileNotFoundError, RuntimeError, ValueError) as exc:
                    skipped.append(f"{name} {label}: {type(exc).__name__}: {exc}")
    else:
        skipped.append("no model catalogue given (LEASEHOLD_MODEL_CATALOGUE or --catalogue): no real weights measured")
    print()
    print(HEADER)
    for row in rows:
        print(row.line())
    for line in skipped:
        print(f"not measured: {line}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
