"""The device a model runs on and the torch settings that make its runs reproducible.

Fixed thread count and deterministic kernels: the same inputs give the same bits in every
process, which is what makes resumed runs byte-identical.
"""

from __future__ import annotations

import os

import torch


def resolve_device(setting: str) -> torch.device:
    """``auto`` picks CUDA when present."""
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(setting)


def make_deterministic(device: torch.device, threads: int, warn_only: bool = False) -> None:
    """Set this process's torch up for reproducible runs on ``device`` (before loading a model);
    ``warn_only``: an op without a deterministic kernel warns instead of failing."""
    torch.set_num_threads(threads)
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
