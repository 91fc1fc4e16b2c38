"""The input image of an image-to-video job (``input_reference``; ``image`` on predictions).

Both surfaces hand the bytes here, however they arrived (a multipart file, a data URL). The
checks read the bytes, never a file name or a declared type:

* the format, from the file's signature: PNG, JPEG or WebP;
* the dimensions, from the format's header (no image library in the API process): they must
  equal the job's size, as OpenAI requires, and the message says both when they differ;
* the size, at most ``MAX_REFERENCE_BYTES``.

A refusal is a 400 naming ``input_reference`` (the Replicate surface renames it ``image``)
and stores nothing. An accepted image is stored under the job (``reference_key``) just before
the job's row is reserved, and removed again if the reservation is refused. The GPU worker
decodes it fully and fails the job with a reason if the body past the header is damaged.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

from api.errors import ApiError, invalid
from workflows.video.models import VideoModelSpec
from workflows.video.types import InputReference, reference_key

# The largest image accepted (bytes); docs/models.md says it too.
MAX_REFERENCE_BYTES = 10 * 1024 * 1024
# Base64 grows bytes by 4/3: the longest data URL that can hold the largest image.
MAX_DATA_URL_CHARS = MAX_REFERENCE_BYTES * 4 // 3 + 64
FIELD = "input_reference"
FORMATS = "PNG, JPEG or WebP"

# JPEG start-of-frame markers (baseline, progressive, lossless, arithmetic): they carry the size.
_JPEG_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
# JPEG markers without a length field.
_JPEG_BARE = frozenset({0x01, 0xD8, *range(0xD0, 0xD8)})


@dataclass(frozen=True)
class ReferenceImage:
    """An image whose format and dimensions were read from its bytes."""

    data: bytes
    content_type: str
    extension: str
    width: int
    height: int

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def _refuse(message: str) -> ApiError:
    # The message says "the image"; ``param`` names the field (each surface its own name).
    return invalid(FIELD, message)


def _png_size(data: bytes) -> tuple[int, int]:
    if len(data) < 24 or data[12:16] != b"IHDR":
        raise _refuse("a PNG without its header (IHDR)")
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _jpeg_size(data: bytes) -> tuple[int, int]:
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            break
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte before a marker
            i += 1
            continue
        if marker in _JPEG_BARE:
            i += 2
            continue
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if marker in _JPEG_SOF and i + 9 <= len(data):
            return int.from_bytes(data[i + 7 : i + 9], "big"), int.from_bytes(data[i + 5 : i + 7], "big")
        if marker == 0xDA or length < 2:  # image data before any frame header
            break
        i += 2 + length
    raise _refuse("a JPEG without a frame header")


def _webp_size(data: bytes) -> tuple[int, int]:
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        return int.from_bytes(data[26:28], "little") & 0x3FFF, int.from_bytes(data[28:30], "little") & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(data) >= 30:
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    raise _refuse("a WebP without a VP8, VP8L or VP8X header")


def read_image(data: bytes) -> ReferenceImage:
    """The image in ``data``; a 400 naming ``input_reference`` when it is too large or not an image
    of a format taken here."""
    if len(data) > MAX_REFERENCE_BYTES:
        raise _refuse(f"the image is {len(data)} bytes; the most is {MAX_REFERENCE_BYTES} bytes (10 MiB)")
    if not data:
        raise _refuse(f"the image is empty; send a {FORMATS} file")
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        kind, extension, (width, height) = "image/png", "png", _png_size(data)
    elif data.startswith(b"\xff\xd8\xff"):
        kind, extension, (width, height) = "image/jpeg", "jpg", _jpeg_size(data)
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        kind, extension, (width, height) = "image/webp", "webp", _webp_size(data)
    else:
        raise _refuse(f"not an image of a format taken here ({FORMATS}; read from the bytes, not the file name)")
    if width < 1 or height < 1:
        raise _refuse(f"the image header says {width}x{height}")
    return ReferenceImage(data=data, content_type=kind, extension=extension, width=width, height=height)


def data_url_bytes(url: str) -> bytes:
    """The bytes of a base64 ``data:`` URL (``data:image/png;base64,...``); 400 otherwise."""
    if len(url) > MAX_DATA_URL_CHARS:
        raise _refuse(f"the data URL holds more than {MAX_REFERENCE_BYTES} bytes (10 MiB)")
    head, comma, body = url.partition(",")
    if not head.lower().startswith("data:"):
        raise _refuse("give the image as a file upload or a base64 data URL (data:image/png;base64,...)")
    if not comma or not head.lower().endswith(";base64"):
        raise _refuse("a data URL must be base64-encoded (data:image/png;base64,...)")
    try:
        return base64.b64decode(body.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise _refuse("the data URL's base64 does not decode") from None


def job_reference(job_id: str, spec: VideoModelSpec, image: ReferenceImage | None, size: str) -> InputReference | None:
    """What the job records of its image: it must have one exactly when its model takes one,
    of the job's size (``WIDTHxHEIGHT``)."""
    if image is None:
        if spec.takes_image:
            raise _refuse(f"an image is required: {spec.name} makes a video from an image (its first frame)")
        return None
    if not spec.takes_image:
        raise _refuse(f"{spec.name} makes videos from text alone and takes no image")
    width, height = (int(side) for side in size.split("x"))
    if (image.width, image.height) != (width, height):
        raise _refuse(
            f"the image is {image.width}x{image.height} but the video is {width}x{height}: it must have the "
            f"video's size (resize it, or ask for size {image.width}x{image.height} if {spec.name} offers it)"
        )
    return InputReference(
        key=reference_key(job_id, image.sha256, image.extension),
        sha256=image.sha256,
        content_type=image.content_type,
        width=image.width,
        height=image.height,
        size_bytes=len(image.data),
    )
