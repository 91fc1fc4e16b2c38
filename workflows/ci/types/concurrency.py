"""``concurrency:`` groups (``CIConcurrencyGroupWorkflow``): their signals and state."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel


class GroupRequest(BaseModel):
    """Signal ``group_acquire``: a run asks to enter a group, for itself (``key`` = ``run#<n>``)
    or for one job round (``<job>#<round>``)."""

    holder: str
    key: str
    cancel_in_progress: bool = False


class GroupRelease(BaseModel):
    """Signal ``group_release``: the run or job left the group (done, cancelled, or gave up waiting)."""

    holder: str
    key: str


class GroupOutcome(StrEnum):
    """What the group tells a request."""

    # It is the group's running member now: go.
    GRANTED = "granted"
    # It was pending and a newer request replaced it: give up (cancelled).
    SUPERSEDED = "superseded"
    # It is running and a newer request with ``cancel-in-progress`` arrived: cancel.
    PREEMPTED = "preempted"


class GroupNotice(BaseModel):
    """Signal ``group_notice`` to the run holding ``key``."""

    key: str
    outcome: GroupOutcome
    group: str = ""


class GroupState(BaseModel):
    """Input (for continue-as-new) and query answer of one group: at most one running and one
    pending member, as GitHub allows."""

    tenant_id: str
    group: str
    running: GroupRequest | None = None
    pending: GroupRequest | None = None
    granted_total: int = 0
