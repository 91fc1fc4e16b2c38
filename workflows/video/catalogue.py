"""Loading the model catalogue from a TOML file (``Settings.model_catalogue``).

Processes call ``load_catalogue`` once at start-up (the API, the GPU worker); workflow code
never does. Every mistake is reported as ``CatalogueError`` naming the file, the entry and the
field, so a deployment fails at start with a line to fix rather than on the first request.

The file::

    [models."wan2.1-t2v-1.3b"]
    family = "wan"
    weights = "/models/Wan2.1-T2V-1.3B-Diffusers"   # relative paths: from this file's folder
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

Only the entries in the file are served (list ``procedural-v1`` with ``family =
"procedural"`` to keep the stand-in).
"""

from __future__ import annotations

import datetime as dt
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workflows.video.models import (
    DEFAULT_CATALOGUE,
    DTYPES,
    FAMILIES,
    PROCEDURAL_V1,
    REMIX_FAMILIES,
    SCHEDULERS,
    VideoModelSpec,
    parse_size,
)

# Names appear in task-queue names and URLs: keep them plain.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Spatial size multiple per family: the VAE's downsampling x the transformer's patch size.
SIZE_MULTIPLE = {"procedural": 1, "wan": 16, "wan-i2v": 16, "wan-v2v": 16, "ltx": 32, "ltx-i2v": 32}
# Frames are k x this + 1 (the VAE's temporal compression).
FRAME_MULTIPLE = {"procedural": 1, "wan": 4, "wan-i2v": 4, "wan-v2v": 4, "ltx": 8, "ltx-i2v": 8}

_MAX_SIDE = 4096
_MAX_FIELD_CHARS = 4000


class CatalogueError(ValueError):
    """The catalogue file is missing, not TOML, or an entry is wrong (the message names it)."""


_FIELDS: dict[str, type | tuple[type, ...]] = {
    "family": str,
    "description": str,
    "weights": str,
    "hub_id": str,
    "allow_download": bool,
    "dtype": str,
    "scheduler": str,
    "guidance_scale": (int, float),
    "negative_prompt": str,
    "remix_strength": (int, float),
    "version": str,
    "sizes": list,
    "default_size": str,
    "min_seconds": int,
    "max_seconds": int,
    "default_seconds": int,
    "fps": int,
    "default_steps": int,
    "max_steps": int,
    "min_gpu_memory_gib": (int, float),
    "memory_bytes_per_frame_pixel": (int, float),
    "created": (int, dt.date, dt.datetime),
    "owned_by": str,
}
_REQUIRED = ("family", "sizes", "default_size", "min_seconds", "max_seconds", "default_seconds", "fps", "default_steps")

# Builds the error of one field of the entry being read (its message names the entry).
_Fail = Callable[[str, str], CatalogueError]


def load_catalogue(path: Path | None) -> dict[str, VideoModelSpec]:
    """The catalogue in ``path``; the embedded default (``procedural-v1``) when ``None``."""
    if path is None:
        return dict(DEFAULT_CATALOGUE)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CatalogueError(f"model catalogue {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise CatalogueError(f"model catalogue {path}: not valid TOML ({exc})") from None
    return parse_catalogue(data, path)


def parse_catalogue(data: dict[str, Any], path: Path) -> dict[str, VideoModelSpec]:
    """Validate the parsed TOML of ``path`` (relative weights resolve from its folder)."""
    where = f"model catalogue {path}"
    unknown = sorted(set(data) - {"models"})
    if unknown:
        raise CatalogueError(f"{where}: unknown top-level key {unknown[0]!r} (entries go under [models.NAME])")
    models = data.get("models")
    if not isinstance(models, dict) or not models:
        raise CatalogueError(f"{where}: no [models.NAME] entries")
    return {name: _entry(where, name, table, path.parent) for name, table in models.items()}


def _entry(where: str, name: str, table: Any, base: Path) -> VideoModelSpec:
    here = f"{where}: models.{name}"

    def fail(field: str, message: str) -> CatalogueError:
        return CatalogueError(f"{here}.{field}: {message}")

    if not _NAME.match(name):
        raise CatalogueError(f"{here}: the name must be 1-64 letters, digits, '.', '_' or '-'")
    if not isinstance(table, dict):
        raise CatalogueError(f"{here}: must be a table")
    _check_fields(table, fail)

    family = table["family"]
    if family not in FAMILIES:
        raise fail("family", f"{family!r} is not one of {', '.join(FAMILIES)}")
    if family == "procedural" and name != PROCEDURAL_V1.name:
        raise fail("family", f"the procedural stand-in is served only as {PROCEDURAL_V1.name!r}")

    weights, hub_id = _weights(family, table, base, fail)

    dtype = table.get("dtype", "float32")
    if dtype not in DTYPES:
        raise fail("dtype", f"{dtype!r} is not one of {', '.join(DTYPES)}")
    scheduler = table.get("scheduler", "pipeline")
    if scheduler not in SCHEDULERS:
        raise fail("scheduler", f"{scheduler!r} is not one of {', '.join(SCHEDULERS)}")

    sizes = _sizes(family, table, fail)

    min_s, max_s, default_s = table["min_seconds"], table["max_seconds"], table["default_seconds"]
    max_steps = _check_limits(table, fail)

    created = _created(table)

    if family == "procedural":
        # The stand-in's sampler is code: only the request limits are the operator's to set.
        base_spec = PROCEDURAL_V1
    else:
        base_spec = None
    return VideoModelSpec(
        name=name,
        description=table.get("description", base_spec.description if base_spec else f"{family} model {name}"),
        sizes=tuple(sizes),
        min_seconds=min_s,
        max_seconds=max_s,
        default_seconds=default_s,
        default_size=table["default_size"],
        fps=table["fps"],
        default_steps=table["default_steps"],
        max_steps=max_steps,
        family=family,
        weights=weights,
        hub_id=hub_id,
        allow_download=table.get("allow_download", False),
        dtype=dtype,
        scheduler=scheduler,
        guidance_scale=float(table.get("guidance_scale", 5.0)),
        negative_prompt=table.get("negative_prompt", ""),
        remix_strength=_remix_strength(family, table, fail),
        frame_multiple=FRAME_MULTIPLE[family],
        version=table.get("version", ""),
        min_gpu_memory_gib=float(table.get("min_gpu_memory_gib", 0.0)),
        memory_bytes_per_frame_pixel=float(table.get("memory_bytes_per_frame_pixel", 0.0)),
        created=created or (base_spec.created if base_spec else 0),
        owned_by=table.get("owned_by", "leasehold"),
    )


def _check_fields(table: dict[str, Any], fail: _Fail) -> None:
    """Every field known and of its type; every required one present."""
    for field, value in table.items():
        expected = _FIELDS.get(field)
        if expected is None:
            raise fail(field, f"unknown field (known: {', '.join(sorted(_FIELDS))})")
        # bool is an int in Python; a flag is never a number here, nor the other way round.
        if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
            raise fail(field, f"expected {_type_name(expected)}, got {type(value).__name__}")
        if isinstance(value, str) and len(value) > _MAX_FIELD_CHARS:
            raise fail(field, f"longer than {_MAX_FIELD_CHARS} characters")
    for field in _REQUIRED:
        if field not in table:
            raise fail(field, "required")


def _weights(family: str, table: dict[str, Any], base: Path, fail: _Fail) -> tuple[str | None, str | None]:
    """``(weights, hub_id)``: exactly one for a real model (a local folder resolved against ``base``)."""
    weights, hub_id = table.get("weights"), table.get("hub_id")
    if family == "procedural":
        if weights is not None or hub_id is not None:
            raise fail("weights", "the procedural stand-in has no weights")
    elif (weights is None) == (hub_id is None):
        raise fail("weights", "give exactly one of weights (a local folder) or hub_id")
    if weights is not None:
        folder = Path(weights).expanduser()
        folder = (folder if folder.is_absolute() else base / folder).resolve()
        weights = str(folder)
    if hub_id is not None and not re.match(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$", hub_id):
        raise fail("hub_id", "expected owner/name")
    return weights, hub_id


def _sizes(family: str, table: dict[str, Any], fail: _Fail) -> list[str]:
    """The offered sizes, each within bounds and a multiple the family needs; the default among them."""
    sizes = table["sizes"]
    if not sizes or not all(isinstance(s, str) for s in sizes):
        raise fail("sizes", "expected a non-empty list of WIDTHxHEIGHT strings")
    multiple = SIZE_MULTIPLE[family]
    for size in sizes:
        try:
            width, height = parse_size(size)
        except ValueError as exc:
            raise fail("sizes", str(exc)) from None
        if not (0 < width <= _MAX_SIDE and 0 < height <= _MAX_SIDE):
            raise fail("sizes", f"{size}: each side must be 1..{_MAX_SIDE}")
        if width % multiple or height % multiple:
            raise fail("sizes", f"{size}: {family} needs width and height divisible by {multiple}")
    if table["default_size"] not in sizes:
        raise fail("default_size", f"{table['default_size']!r} is not one of sizes")
    return sizes


def _check_limits(table: dict[str, Any], fail: _Fail) -> int:
    """Durations, fps, steps and memory figures in range; ``max_steps`` (given or defaulted)."""
    min_s, max_s, default_s = table["min_seconds"], table["max_seconds"], table["default_seconds"]
    if not 1 <= min_s <= max_s <= 600:
        raise fail("max_seconds", "need 1 <= min_seconds <= max_seconds <= 600")
    if not min_s <= default_s <= max_s:
        raise fail("default_seconds", f"must be between min_seconds ({min_s}) and max_seconds ({max_s})")
    if not 1 <= table["fps"] <= 120:
        raise fail("fps", "must be 1..120")
    max_steps = table.get("max_steps", max(table["default_steps"], 1))
    if not 1 <= max_steps <= 10_000:
        raise fail("max_steps", "must be 1..10000")
    if not 1 <= table["default_steps"] <= max_steps:
        raise fail("default_steps", f"must be between 1 and max_steps ({max_steps})")
    for field in ("min_gpu_memory_gib", "memory_bytes_per_frame_pixel", "guidance_scale"):
        if table.get(field, 0) < 0:
            raise fail(field, "must not be negative")
    return max_steps


def _remix_strength(family: str, table: dict[str, Any], fail: _Fail) -> float:
    """The remix strength (0 < x <= 1); only a remixing family takes one."""
    if "remix_strength" not in table:
        return VideoModelSpec.remix_strength
    if family not in REMIX_FAMILIES:
        raise fail("remix_strength", f"{family} models do not remix (only {', '.join(sorted(REMIX_FAMILIES))})")
    strength = float(table["remix_strength"])
    if not 0 < strength <= 1:
        raise fail("remix_strength", "must be more than 0 and at most 1")
    return strength


def _created(table: dict[str, Any]) -> int:
    """``created`` as a Unix timestamp (TOML may give a date or a date-time)."""
    created = table.get("created", 0)
    if isinstance(created, dt.datetime):
        created = int((created if created.tzinfo else created.replace(tzinfo=dt.UTC)).timestamp())
    elif isinstance(created, dt.date):
        created = int(dt.datetime(created.year, created.month, created.day, tzinfo=dt.UTC).timestamp())
    return created


def _type_name(expected: type | tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false", list: "a list"}
    kinds = expected if isinstance(expected, tuple) else (expected,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)
