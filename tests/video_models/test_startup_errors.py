"""A wrong catalogue, or a model it lacks, stops the API and the GPU worker at start-up with one
line that names the problem (no traceback, nothing served)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from api.app import create_app
from leasehold.devserver import free_port
from leasehold.settings import Settings
from testing.harness import process_env
from tests.video_models.conftest import Catalogue
from workflows.video.catalogue import CatalogueError
from workflows.video.models import get_model


def run_cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        env=process_env(settings),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_api_refuses_a_bad_catalogue_in_one_line(tmp_path: Path, catalogue: Catalogue) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(catalogue.path.read_text().replace("fps = 8", "fps = 0", 1))
    settings = Settings(data_dir=tmp_path / "data", api_port=free_port(), model_catalogue=bad, models=["wan-tiny"])
    done = run_cli(settings, "api")
    assert done.returncode != 0
    assert f"model catalogue {bad}: models.wan-tiny.fps: must be 1..120" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_api_refuses_to_serve_a_model_the_catalogue_lacks(tmp_path: Path, catalogue: Catalogue) -> None:
    lacking = Settings(data_dir=tmp_path / "data", model_catalogue=catalogue.path, models=["wan-tiny", "wan-huge"])
    with pytest.raises(CatalogueError, match="LEASEHOLD_MODELS names wan-huge, which the model catalogue"):
        create_app(lacking)
    # The catalogue the process had stays installed.
    assert get_model("wan-tiny") == catalogue.models["wan-tiny"]


def test_the_gpu_worker_refuses_a_model_the_catalogue_lacks(tmp_path: Path, catalogue: Catalogue) -> None:
    settings = Settings(data_dir=tmp_path / "data", model_catalogue=catalogue.path)
    done = run_cli(settings, "worker", "gpu", "--model", "wan-huge")
    assert done.returncode != 0
    assert (
        "unknown model 'wan-huge'; the catalogue has: wan-tiny, wan-i2v-tiny, wan-v2v-tiny, procedural-v1"
        in done.stderr
    )
    assert "Traceback" not in done.stderr
