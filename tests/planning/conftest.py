"""Fixtures of the simulator's tests: deployment settings with nothing to start."""

from __future__ import annotations

from pathlib import Path

import pytest

from leasehold.settings import Settings


@pytest.fixture
def plan_settings(tmp_path: Path) -> Settings:
    """The deployment's defaults (tier weights, caps, thresholds, timeouts)."""
    return Settings(data_dir=tmp_path / "data")
