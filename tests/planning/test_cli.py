"""``leasehold plan`` end to end (in process): the seed's answers, figures, and one-line errors
for bad scenario files that name the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli.main import main
from planning.scenarios import SMALL

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_seed_scenario_answers_the_seeds_questions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A shorter horizon than the command's default keeps the test quick; the questions are the same.
    code = main(["plan", "--scenario", "seed", "--horizon", "400", "--plots", str(tmp_path / "plots"), "--quiet"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Little's law: 10 jobs/s x 240 GPU-s = 2,400 GPUs busy" in out
    for heading in (
        "## 1. Fleet for 10/s at 240 s mean",
        "## 2. A third of the preemptible GPUs reclaimed over ten minutes",
        "## 3. Cost per video",
        "## 4. Checkpoint interval",
    ):
        assert heading in out
    fleet_line = next(line for line in out.splitlines() if line.startswith("smallest fleet"))
    fleet = int(fleet_line.split(": ")[1].split(" GPUs")[0].replace(",", ""))
    # At least Little's law, and not absurdly more.
    assert 2400 <= fleet <= 3100, fleet_line
    assert "70% spot: $" in out and "0% spot: $" in out
    for name in ("waits.png", "timeline.png", "fleet.png", "checkpoint.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:8] == PNG_MAGIC


def test_a_scenario_file_gets_the_generic_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "small.json"
    path.write_text(json.dumps({**SMALL, "horizon_seconds": 300.0}))
    assert main(["plan", "--scenario", str(path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "## as given" in out and "## smallest fleet per class" in out
    assert "cpu: " in out


def _bad(tmp_path: Path, data: Any, suffix: str = ".yaml") -> Path:
    path = tmp_path / f"bad{suffix}"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("change", "names"),
    [
        (lambda d: d["pools"][0].update(gpus=-1), "pools.0.gpus"),
        (lambda d: d.update(pool=[]), "pool: Extra inputs are not permitted"),
        (lambda d: d.pop("tiers"), "tiers: Field required"),
        (lambda d: d["shapes"][0].update(gpu_class="tpu"), "shapes.0.gpu_class"),
        (lambda d: d["tiers"][0].update(tier="gold"), "tiers.0.tier"),
        (lambda d: d["tiers"][0].update(per_second=5000.0), "horizon_seconds"),
        (lambda d: d["pools"][0].update(preemptions_per_gpu_hour=1.0), "reserved pool"),
        (lambda d: d["shapes"][0].update(gpus=50), "shapes.0.gpus"),
        (lambda d: d.update(warmup_seconds=10_000.0), "warmup_seconds"),
    ],
)
def test_bad_scenario_fields_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any, names: str
) -> None:
    data = json.loads(json.dumps(SMALL))
    change(data)
    path = _bad(tmp_path, data, ".json")
    assert main(["plan", "--scenario", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("leasehold: error: ") and names in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("tiers: [unclosed", "not valid YAML/JSON"),
        ("- a\n- list\n", "a scenario is a mapping"),
        (None, "cannot read it"),
    ],
)
def test_unreadable_scenarios_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, says: str
) -> None:
    path = tmp_path / "missing.yaml" if content is None else _bad(tmp_path, content)
    assert main(["plan", "--scenario", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
