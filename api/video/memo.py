"""What a video job *is*, written once into its execution's memo at start.

The API answers and lists jobs from it, and the capacity tracker reads it to know each queued
job's cost shape and fairness key without asking the workflow.
"""

from __future__ import annotations

from pydantic import BaseModel

WORKFLOW_TYPE = "VideoJobWorkflow"
MEMO_KEY = "job"


class JobMemo(BaseModel):
    """Written into the execution's memo at start: what was asked, by whom, and its hash."""

    request_hash: str
    prompt: str
    model: str
    seconds: int
    width: int
    height: int
    seed: int
    steps: int | None = None
    created_at: float
    expires_after_seconds: int
    # How the generation task was dispatched (Temporal fairness); absent on older jobs.
    fairness_key: str | None = None
    fairness_weight: float | None = None
