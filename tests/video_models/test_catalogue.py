"""The catalogue file: what it accepts, and errors that name the entry and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from workflows.video.catalogue import CatalogueError, load_catalogue
from workflows.video.models import DEFAULT_CATALOGUE, PROCEDURAL_V1

GOOD = """
[models.wan-a]
family = "wan"
weights = "w"
dtype = "bfloat16"
sizes = ["832x480", "480x832"]
default_size = "832x480"
min_seconds = 1
max_seconds = 5
default_seconds = 5
fps = 16
default_steps = 50
max_steps = 100
min_gpu_memory_gib = 16
memory_bytes_per_frame_pixel = 4000
created = 2026-02-01
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "catalogue.toml"
    path.write_text(text)
    return path


def test_no_file_is_the_embedded_stand_in() -> None:
    assert load_catalogue(None) == dict(DEFAULT_CATALOGUE) == {"procedural-v1": PROCEDURAL_V1}


def test_an_entry_loads_with_paths_relative_to_the_file(tmp_path: Path) -> None:
    [(name, spec)] = load_catalogue(write(tmp_path, GOOD)).items()
    assert name == spec.name == "wan-a"
    assert spec.weights == str((tmp_path / "w").resolve())
    assert (spec.family, spec.dtype, spec.fps, spec.max_steps) == ("wan", "bfloat16", 16, 100)
    assert spec.memory_bytes_per_frame_pixel == 4000.0 and spec.min_gpu_memory_gib == 16.0
    assert spec.created == 1769904000  # 2026-02-01T00:00:00Z
    # Wan's VAE takes k x 4 + 1 frames: 5 s at 16 fps is 81 frames, 1 s is 17.
    assert spec.frame_count(5) == 81 and spec.frame_count(1) == 17
    assert PROCEDURAL_V1.frame_count(4) == 32
    assert not spec.remixes and not PROCEDURAL_V1.remixes


def test_a_remixing_entry_takes_a_remix_strength(tmp_path: Path) -> None:
    text = GOOD.replace('family = "wan"', 'family = "wan-v2v"')
    [spec] = load_catalogue(write(tmp_path, text)).values()
    assert spec.remixes and spec.remix_strength == 0.8 and spec.frame_count(1) == 17
    [spec] = load_catalogue(write(tmp_path, text + "remix_strength = 0.6\n")).values()
    assert spec.remix_strength == 0.6


@pytest.mark.parametrize(
    ("change", "names"),
    [
        (('family = "wan"', 'family = "sdxl"'), "models.wan-a.family"),
        (('dtype = "bfloat16"', 'dtype = "int8"'), "models.wan-a.dtype"),
        (("fps = 16", 'fps = "16"'), "models.wan-a.fps"),
        (("fps = 16", "fps = true"), "models.wan-a.fps"),
        (('"480x832"', '"480x830"'), "models.wan-a.sizes"),
        (('"480x832"', '"big"'), "models.wan-a.sizes"),
        (('default_size = "832x480"', 'default_size = "64x64"'), "models.wan-a.default_size"),
        (("default_seconds = 5", "default_seconds = 9"), "models.wan-a.default_seconds"),
        (("default_steps = 50", "default_steps = 500"), "models.wan-a.default_steps"),
        (('weights = "w"', 'hub_id = "not a hub id"'), "models.wan-a.hub_id"),
        (('weights = "w"', 'weights = "w"\nhub_id = "a/b"'), "models.wan-a.weights"),
        (('weights = "w"', 'colour = "red"'), "models.wan-a.colour"),
        (("fps = 16\n", ""), "models.wan-a.fps"),
        (("[models.wan-a]", '[models."wan a/../x"]'), "models.wan a/../x"),
        (("memory_bytes_per_frame_pixel = 4000", "memory_bytes_per_frame_pixel = -1"), "memory_bytes_per_frame_pixel"),
        # Only a remixing family takes a remix strength, and one in (0, 1].
        (("fps = 16", "fps = 16\nremix_strength = 0.5"), "models.wan-a.remix_strength"),
        (('family = "wan"', 'family = "wan-v2v"\nremix_strength = 0'), "models.wan-a.remix_strength"),
        (('family = "wan"', 'family = "wan-v2v"\nremix_strength = 1.5'), "models.wan-a.remix_strength"),
    ],
)
def test_a_bad_entry_is_refused_naming_the_entry_and_field(tmp_path: Path, change: tuple[str, str], names: str) -> None:
    old, new = change
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(CatalogueError) as caught:
        load_catalogue(path)
    assert names in str(caught.value)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("not = [toml", "not valid TOML"),
        ("", "no [models.NAME] entries"),
        ("[other]\nx = 1\n", "unknown top-level key 'other'"),
        (
            "[models.fake]\nfamily = 'procedural'\nsizes=['8x8']\ndefault_size='8x8'\nmin_seconds=1\n"
            "max_seconds=1\ndefault_seconds=1\nfps=1\ndefault_steps=1\n",
            "only as 'procedural-v1'",
        ),
    ],
)
def test_a_bad_file_is_refused(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(CatalogueError, match=r".*") as caught:
        load_catalogue(write(tmp_path, text))
    assert says in str(caught.value)


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CatalogueError, match="cannot read"):
        load_catalogue(tmp_path / "absent.toml")
