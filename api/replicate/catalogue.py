"""The model catalogue as Replicate names it: ``owner/name`` models with one version each.

A catalogue entry is one model version (``workflows.video.models``); Replicate identifies a
version by an opaque 64-hex id, derived here from the entry's name and version stamp, so the
id changes exactly when the weights do (the same stamp refuses another version's checkpoints).
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from typing import Any

from api.replicate.problems import invalid_input, not_found
from leasehold.settings import Settings
from workflows.video.models import VideoModelSpec, get_model

_VERSION_ID = re.compile(r"^[0-9a-f]{64}$")
# What Replicate's Cog reports; clients read it only to pick the schema's dialect.
COG_VERSION = "0.9.0"


def version_id(spec: VideoModelSpec) -> str:
    """The entry's Replicate version id."""
    return hashlib.sha256(f"leasehold-model-version\0{spec.name}\0{spec.model_version}".encode()).hexdigest()


def model_ref(spec: VideoModelSpec) -> str:
    """``owner/name``."""
    return f"{spec.owned_by}/{spec.name}"


def served(settings: Settings) -> list[VideoModelSpec]:
    """The entries this deployment serves, in the settings' order."""
    return [spec for name in settings.models if (spec := get_model(name)) is not None]


def by_name(settings: Settings, owner: str, name: str) -> VideoModelSpec:
    """The served entry ``owner/name``; 404 otherwise."""
    spec = get_model(name) if name in settings.models else None
    if spec is None or spec.owned_by != owner:
        raise not_found(f"model {owner}/{name}")
    return spec


def by_version(settings: Settings, version: str) -> VideoModelSpec:
    """The served entry a create body's ``version`` names: a version id, ``owner/name`` or
    ``owner/name:id`` (Replicate accepts all three); 422 naming ``version`` otherwise."""
    ref, _, wanted = version.partition(":")
    if "/" in ref:
        owner, _, name = ref.partition("/")
        spec = get_model(name) if name in settings.models else None
        if spec is None or spec.owned_by != owner or (wanted and wanted != version_id(spec)):
            raise invalid_input("version", f"no model version {version!r} is served here")
        return spec
    if _VERSION_ID.match(version):
        for spec in served(settings):
            if version_id(spec) == version:
                return spec
    raise invalid_input("version", f"no model version {version!r} is served here")


def _created_at(spec: VideoModelSpec) -> str:
    return datetime.fromtimestamp(spec.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def input_schema(spec: VideoModelSpec) -> dict[str, Any]:
    """The ``Input`` a version accepts (``api.replicate.inputs`` maps it onto a video request);
    an image-to-video version also requires ``image``, the first frame, of the video's size."""
    schema: dict[str, Any] = {
        "type": "object",
        "title": "Input",
        "required": ["prompt", "image"] if spec.takes_image else ["prompt"],
        "properties": {
            "prompt": {"type": "string", "title": "Prompt", "x-order": 0},
            "seconds": {
                "type": "integer",
                "title": "Seconds",
                "minimum": spec.min_seconds,
                "maximum": spec.max_seconds,
                "default": spec.default_seconds,
                "x-order": 1,
            },
            "num_frames": {
                "type": "integer",
                "title": "Num Frames",
                "description": f"Frames at {spec.fps} fps; rounded up to whole seconds (instead of seconds).",
                "x-order": 2,
            },
            "size": {
                "type": "string",
                "title": "Size",
                "enum": list(spec.sizes),
                "default": spec.default_size,
                "x-order": 3,
            },
            "resolution": {
                "type": "string",
                "title": "Resolution",
                "description": "WIDTHxHEIGHT (instead of size), or a height such as 480p with aspect_ratio.",
                "x-order": 4,
            },
            "aspect_ratio": {"type": "string", "title": "Aspect Ratio", "enum": ["16:9", "9:16"], "x-order": 5},
            "width": {"type": "integer", "title": "Width", "x-order": 6},
            "height": {"type": "integer", "title": "Height", "x-order": 7},
            "seed": {"type": "integer", "title": "Seed", "minimum": 0, "x-order": 8},
            "num_inference_steps": {
                "type": "integer",
                "title": "Num Inference Steps",
                "minimum": 1,
                "maximum": spec.max_steps,
                "default": spec.default_steps,
                "x-order": 9,
            },
        },
    }
    if spec.takes_image:
        schema["properties"]["image"] = _uri_input(
            "Image", "The first frame: PNG, JPEG or WebP of the video's size, as a data URI.", 10
        )
    if spec.remixes:
        schema["properties"]["video"] = _uri_input(
            "Video",
            "A finished prediction of yours to remix from the new prompt: its id, its urls.get URL or its output URL.",
            11,
        )
    return schema


def _uri_input(title: str, description: str, order: int) -> dict[str, Any]:
    return {"type": "string", "format": "uri", "title": title, "description": description, "x-order": order}


def version_object(spec: VideoModelSpec) -> dict[str, Any]:
    """Replicate's version object; its schema is Cog's (``Input``, and ``Output``: one file URL)."""
    return {
        "id": version_id(spec),
        "created_at": _created_at(spec),
        "cog_version": COG_VERSION,
        "openapi_schema": {
            "openapi": "3.0.2",
            "info": {"title": spec.name, "version": spec.model_version},
            "paths": {},
            "components": {
                "schemas": {
                    "Input": input_schema(spec),
                    "Output": {"type": "string", "format": "uri", "title": "Output"},
                }
            },
        },
    }


def model_object(spec: VideoModelSpec, base_url: str) -> dict[str, Any]:
    """Replicate's model object, its latest (only) version included."""
    return {
        "url": f"{base_url}/v1/models/{model_ref(spec)}",
        "owner": spec.owned_by,
        "name": spec.name,
        "description": spec.description,
        "visibility": "public",
        "github_url": None,
        "paper_url": None,
        "license_url": None,
        "run_count": 0,
        "cover_image_url": None,
        "default_example": None,
        "latest_version": version_object(spec),
    }
