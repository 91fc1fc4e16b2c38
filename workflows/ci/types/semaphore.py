"""The per-tenant cap on running CI jobs (``CITenantSemaphoreWorkflow``): its signals and state."""

from __future__ import annotations

from pydantic import BaseModel, Field


class SlotRequest(BaseModel):
    """Signal ``acquire``: a run asks for a slot for one job round (``key`` = ``<job>#<round>``)."""

    holder: str
    key: str
    # The tenant's cap as the run knows it (the newest request's value applies).
    limit: int


class SlotRelease(BaseModel):
    """Signal ``release``: the job round ended (or was cancelled while waiting)."""

    holder: str
    key: str


class SlotTransfer(BaseModel):
    """Signal ``transfer``: a run hands the slot of a job round that just ended (``from_key``) to
    its next job round (``to_key``) instead of releasing it and asking again: the number of
    slots held does not change, so the cap stays exact and the next job needs no grant."""

    holder: str
    from_key: str
    to_key: str
    limit: int


class SlotRequests(BaseModel):
    """Signal ``acquire_many``: the ``acquire`` requests of one run's scheduling pass, in one signal."""

    requests: list[SlotRequest]


class SlotReleases(BaseModel):
    """Signal ``release_many``: several job rounds of one run ended in one pass."""

    holder: str
    keys: list[str]


class SlotGrants(BaseModel):
    """Signal ``slots_granted`` to a run: every grant of one semaphore round for that run."""

    keys: list[str]


class SemaphoreState(BaseModel):
    """Input (for continue-as-new) and query answer of the tenant semaphore."""

    tenant_id: str
    limit: int = 1
    holders: list[SlotRequest] = Field(default_factory=list)
    pending: list[SlotRequest] = Field(default_factory=list)
    granted_total: int = 0
    # Slots a run handed from a finished job round to its next one (``SlotTransfer``).
    transferred_total: int = 0
