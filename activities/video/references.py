"""Reading a job's stored input on a GPU worker: an image-to-video job's image
(``VideoRequest.input_reference``) or a remix's source video (``VideoRequest.source_video``)."""

from __future__ import annotations

import hashlib

from temporalio.exceptions import ApplicationError

from leasehold.storage import ObjectNotFound, ObjectStore
from workflows.video.types import InputReference, VideoErrorType


def read_reference(store: ObjectStore, reference: InputReference, what: str = "input_reference image") -> bytes:
    """The input's bytes, as the API stored them (``what`` names it in errors).

    A missing or altered input fails the job for good; an unreachable store raises what the
    store raised, so the attempt fails and Temporal retries it.
    """
    try:
        data = store.get(reference.key)
    except ObjectNotFound:
        raise _invalid(f"the job's {what} is no longer stored") from None
    if hashlib.sha256(data).hexdigest() != reference.sha256:
        raise _invalid(f"the stored {what} is not the one the job was given")
    return data


def _invalid(message: str) -> ApplicationError:
    return ApplicationError(message, type=VideoErrorType.INVALID_REQUEST, non_retryable=True)
