"""``leasehold fleet run`` refuses a bad spec in one line naming the field, and ``leasehold up``
runs the controller in place of the fixed GPU worker when a spec is configured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cli.up import build_children
from leasehold.settings import Settings


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ('[[pools]]\nmodel="procedural-v1"\ncapacity_type="reserved"\nmin_workers=3\nmax_workers=1\n', "pools.0"),
        ('[[pools]]\nmodel="procedural-v1"\ncapacity_type="spot"\n', "pools.0.capacity_type"),
        ("pools = [", "is not valid toml"),
        ("tick_seconds = 1\n", "pools: Field required"),
    ],
)
def test_bad_specs_are_one_line_errors(tmp_path: Path, spec: str, expected: str) -> None:
    config = tmp_path / "fleet.toml"
    config.write_text(spec)
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "fleet", "run", "--data-dir", str(tmp_path), "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("leasehold: error: ") and expected in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_up_runs_the_controller_instead_of_a_fixed_gpu_worker(tmp_path: Path) -> None:
    plain = Settings(data_dir=tmp_path)
    _temporal, apps = build_children(plain, 8000, 7233, None, "temporal")
    assert "worker-gpu" in [c.name for c in apps] and "fleet" not in [c.name for c in apps]
    spec = tmp_path / "fleet.toml"
    fleet = Settings(data_dir=tmp_path, fleet_config=spec)
    _temporal, apps = build_children(fleet, 8000, 7233, None, "temporal")
    (controller,) = [c for c in apps if c.name == "fleet"]
    assert "worker-gpu" not in [c.name for c in apps]
    assert controller.argv[-4:] == ["fleet", "run", "--config", str(spec)]
