"""Ids of video jobs and of their workflow executions.

Light on purpose (stdlib only): the API mints and parses job ids, the capacity tracker maps
the executions it lists back to jobs, and the workflow's contract names the same scheme.
"""

from __future__ import annotations

import hashlib
import secrets

JOB_ID_PREFIX = "video_"
WORKFLOW_ID_PREFIX = "video-"
_HEX_CHARS = 32


def new_job_id() -> str:
    """A fresh random job id."""
    return JOB_ID_PREFIX + secrets.token_hex(_HEX_CHARS // 2)


def derived_job_id(*parts: str) -> str:
    """The job id fixed by ``parts`` (the same parts -> the same job): idempotent submits."""
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()
    return JOB_ID_PREFIX + digest[:_HEX_CHARS]


def is_job_id(value: str) -> bool:
    """Whether ``value`` has the shape of a job id (checked before any lookup)."""
    rest = value.removeprefix(JOB_ID_PREFIX)
    return rest != value and len(rest) == _HEX_CHARS and all(c in "0123456789abcdef" for c in rest)


def workflow_id(job_id: str) -> str:
    """The id of the ``VideoJobWorkflow`` execution of ``job_id``."""
    return WORKFLOW_ID_PREFIX + job_id


def job_id_of(workflow_id_: str) -> str:
    """The job id of a ``VideoJobWorkflow`` execution id."""
    return workflow_id_.removeprefix(WORKFLOW_ID_PREFIX)
