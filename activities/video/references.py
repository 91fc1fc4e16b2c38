"""Reading an image-to-video job's input image (``VideoRequest.input_reference``) on a GPU worker."""

from __future__ import annotations

import hashlib

from temporalio.exceptions import ApplicationError

from leasehold.storage import ObjectNotFound, ObjectStore
from workflows.video.types import InputReference, VideoErrorType


def read_reference(store: ObjectStore, reference: InputReference) -> bytes:
    """The image's bytes, as the API stored them.

    A missing or altered image fails the job for good; an unreachable store raises what the
    store raised, so the attempt fails and Temporal retries it.
    """
    try:
        data = store.get(reference.key)
    except ObjectNotFound:
        raise _invalid("the job's input_reference image is no longer stored") from None
    if hashlib.sha256(data).hexdigest() != reference.sha256:
        raise _invalid("the stored input_reference image is not the one the job was given")
    return data


def _invalid(message: str) -> ApplicationError:
    return ApplicationError(message, type=VideoErrorType.INVALID_REQUEST, non_retryable=True)
