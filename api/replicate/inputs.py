"""A prediction's ``input`` as a ``/v1/videos`` create request: one job model, two surfaces.

Replicate's video models take ``prompt`` with ``num_frames`` or ``seconds``, ``resolution`` or
``size`` (or ``width``/``height``), ``seed`` and ``num_inference_steps``; each maps onto one
field of ``VideoCreateRequest``, which the submit path then checks against the catalogue
entry like any other create; ``image`` (image-to-video models) is ``input_reference``'s
bytes (``image_input``); ``video`` (video-to-video models) names a finished prediction of the
caller's to remix (``video_input``): its id, its ``urls.get`` or its output URL, as a client
that chains two predictions passes ``output.url``. A field the model does not take is a 422
naming it, never ignored: a caller who sent ``negative_prompt`` would otherwise get a video
that ignored it.
"""

from __future__ import annotations

import math
import re
import urllib.parse
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from api.errors import ApiError
from api.replicate.problems import invalid_input
from api.schemas.video import VideoCreateRequest
from api.video.reference import ReferenceImage, data_url_bytes, read_image
from workflows.video.ids import is_job_id
from workflows.video.models import VideoModelSpec, format_size, parse_size

# The inputs a version takes (its schema, ``api.replicate.catalogue.input_schema``).
KNOWN_INPUTS = frozenset(
    {
        "prompt",
        "seconds",
        "num_frames",
        "size",
        "resolution",
        "aspect_ratio",
        "width",
        "height",
        "seed",
        "num_inference_steps",
        "image",
        "video",
    }
)
# Inputs Replicate video models take that this deployment does not serve (yet): named as such.
NOT_SERVED = {
    "negative_prompt": "this model takes no negative prompt",
    "fps": "the frame rate is the model's own",
}
# Which input field a request field came from, so an error from the shared checks names the
# field the caller sent.
REQUEST_FIELDS = {"steps": "num_inference_steps", "input_reference": "image", "video_id": "video"}


def _integer(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise invalid_input(f"input.{field}", "must be an integer")
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise invalid_input(f"input.{field}", "must be an integer") from None
    return value


def _size(fields: dict[str, Any], spec: VideoModelSpec) -> str | None:
    """``size``, ``resolution`` (``WxH`` or ``480p`` with ``aspect_ratio``) or ``width``/``height``."""
    given = [name for name in ("size", "resolution") if fields.get(name) is not None]
    if (fields.get("width") is not None or fields.get("height") is not None) and given:
        raise invalid_input(f"input.{given[0]}", "give size, resolution or width and height, not several")
    if len(given) > 1:
        raise invalid_input("input.resolution", "give size or resolution, not both")
    if fields.get("width") is not None or fields.get("height") is not None:
        if fields.get("width") is None or fields.get("height") is None:
            missing = "width" if fields.get("width") is None else "height"
            raise invalid_input(f"input.{missing}", "width and height go together")
        return format_size(_integer(fields["width"], "width"), _integer(fields["height"], "height"))
    if not given:
        if fields.get("aspect_ratio") is not None:
            raise invalid_input("input.aspect_ratio", "aspect_ratio goes with a resolution such as 480p")
        return None
    name = given[0]
    value = fields[name]
    if not isinstance(value, str):
        raise invalid_input(f"input.{name}", "must be a string such as 480x832 or 480p")
    text = value.strip().lower()
    if text.endswith("p") and text[:-1].isdigit():
        return _by_height(int(text[:-1]), fields.get("aspect_ratio"), spec, name)
    if fields.get("aspect_ratio") is not None:
        raise invalid_input("input.aspect_ratio", "aspect_ratio goes with a resolution such as 480p")
    try:
        parse_size(text)
    except ValueError:
        raise invalid_input(f"input.{name}", f"must be WIDTHxHEIGHT or a height such as 480p (got {value!r})") from None
    return text


def _by_height(lines: int, aspect: Any, spec: VideoModelSpec, field: str) -> str:
    """The model's size with ``lines`` as its short side, in the orientation ``aspect`` asks."""
    if aspect not in (None, "16:9", "9:16"):
        raise invalid_input("input.aspect_ratio", f"must be 16:9 or 9:16 (got {aspect!r})")
    for size in spec.sizes:
        width, height = parse_size(size)
        landscape = width >= height
        if min(width, height) == lines and (aspect is None or landscape == (aspect == "16:9")):
            return size
    raise invalid_input(
        f"input.{field}",
        f"{spec.name} offers no {lines}p size{f' at {aspect}' if aspect else ''}; sizes: " + ", ".join(spec.sizes),
    )


def create_request(fields: dict[str, Any], spec: VideoModelSpec) -> VideoCreateRequest:
    """The create request for a prediction's ``input`` on ``spec``; 422 naming the field otherwise."""
    for name in fields:
        if name in NOT_SERVED:
            raise invalid_input(f"input.{name}", NOT_SERVED[name])
        if name not in KNOWN_INPUTS:
            raise invalid_input(
                f"input.{name}", f"{spec.name} takes no input {name!r}; it takes: {', '.join(sorted(KNOWN_INPUTS))}"
            )
    if not isinstance(fields.get("prompt"), str) or not fields["prompt"].strip():
        # A remix needs its new prompt too (the source video gives the rest).
        raise invalid_input("input.prompt", "is required: a non-empty string saying what to generate")
    if fields.get("seconds") is not None and fields.get("num_frames") is not None:
        raise invalid_input("input.num_frames", "give num_frames or seconds, not both")
    seconds: int | None = None
    if fields.get("seconds") is not None:
        seconds = _integer(fields["seconds"], "seconds")
    elif fields.get("num_frames") is not None:
        frames = _integer(fields["num_frames"], "num_frames")
        if frames < 1:
            raise invalid_input("input.num_frames", "must be at least 1")
        seconds = math.ceil(frames / spec.fps)
    body = {
        "prompt": fields.get("prompt"),
        "model": spec.name,
        "seconds": seconds,
        "size": _size(fields, spec),
        "seed": fields.get("seed"),
        "steps": fields.get("num_inference_steps"),
    }
    try:
        return VideoCreateRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        name = str(first["loc"][0]) if first.get("loc") else "prompt"
        raise invalid_input(f"input.{REQUEST_FIELDS.get(name, name)}", first["msg"]) from None


def image_input(fields: dict[str, Any], uploaded: Callable[[str], bytes | None]) -> ReferenceImage | None:
    """The ``image`` input, as Replicate's clients send a file: the URL of an upload to this
    server's Files API (``uploaded`` reads it; ``api.replicate.files``) or a data URI (the
    client's ``file_encoding_strategy="base64"``); 422 naming ``input.image`` when it is not an
    image taken here (``api.video.reference``)."""
    value = fields.get("image")
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid_input("input.image", "must be a file URL or a data URI (data:image/png;base64,...)")
    data = uploaded(value)
    if data is None and value.lower().startswith(("http://", "https://")):
        raise invalid_input(
            "input.image",
            "only this server's file URLs (POST /v1/files) are read, other URLs are not fetched; upload "
            "the file or send it as a data URI (data:image/png;base64,...)",
        )
    try:
        return read_image(data if data is not None else data_url_bytes(value))
    except ApiError as exc:
        raise invalid_input("input.image", exc.message) from None


_PREDICTION_PATH = re.compile(r"^/v1/predictions/([^/]+)/?$")
_OUTPUT_NAME = re.compile(r'filename="?([^"/;]+)\.mp4"?')
VIDEO_FORMS = "a finished prediction of yours: its id, its urls.get URL or its output URL"


def video_input(fields: dict[str, Any], spec: VideoModelSpec, base_url: str) -> str | None:
    """The prediction id the ``video`` input names (``None``: no ``video``); 422 naming
    ``input.video`` when ``spec`` cannot remix or the value names no prediction. Whose it is, and
    whether it finished, the remix itself checks (``api.video.remix``)."""
    value = fields.get("video")
    if value is None:
        return None
    if not spec.remixes:
        raise invalid_input("input.video", f"{spec.name} takes no video; a video-to-video model remixes one")
    if not isinstance(value, str) or len(value) > 4096:
        raise invalid_input("input.video", f"must name {VIDEO_FORMS}")
    found = _prediction_of(value.strip(), base_url)
    if found is None:
        raise invalid_input("input.video", f"must name {VIDEO_FORMS}; other videos are not fetched")
    return found


def _prediction_of(value: str, base_url: str) -> str | None:
    if is_job_id(value):
        return value
    url = urllib.parse.urlsplit(value)
    base = urllib.parse.urlsplit(base_url)
    if url.scheme not in ("http", "https"):
        return None
    if (url.scheme, url.netloc) == (base.scheme, base.netloc):
        match = _PREDICTION_PATH.match(url.path.removeprefix(base.path.rstrip("/")))
        if match and is_job_id(match.group(1)):
            return match.group(1)
    # An output URL (the object store's signed link) names its download ``<id>.mp4``.
    query = urllib.parse.parse_qs(url.query)
    names = query.get("filename", []) + [
        m.group(1) + ".mp4" for v in query.get("response-content-disposition", []) if (m := _OUTPUT_NAME.search(v))
    ]
    for name in names:
        job_id = name.removesuffix(".mp4")
        if name.endswith(".mp4") and is_job_id(job_id):
            return job_id
    return None


def input_field(param: str | None) -> str:
    """The input field a shared check's ``param`` stands for (``steps`` -> ``input.num_inference_steps``)."""
    if param is None or param == "model":
        return "version" if param == "model" else "input"
    return f"input.{REQUEST_FIELDS.get(param, param)}"
