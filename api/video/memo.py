"""What a video job *is*, written once into its execution's memo at start.

The API answers and lists jobs from it, and the capacity tracker reads it to know each queued
job's cost shape and fairness key without asking the workflow.
"""

from __future__ import annotations

from workflows.video.types import VideoRequest

WORKFLOW_TYPE = "VideoJobWorkflow"
MEMO_KEY = "job"


class JobMemo(VideoRequest):
    """Written into the execution's memo at start: the resolved request (its fields, flat, as
    jobs already running have them), its hash, and when and how it was dispatched."""

    request_hash: str
    created_at: float
    expires_after_seconds: int
    # How the generation task was dispatched (Temporal fairness); absent on older jobs.
    fairness_key: str | None = None
    fairness_weight: float | None = None
