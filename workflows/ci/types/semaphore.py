"""The per-tenant cap on running CI jobs (``CITenantSemaphoreWorkflow``): its signals and state."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

ACTIVITY_SERVED_QUEUES = "ci_served_queues"


class SlotRequest(BaseModel):
    """Signal ``acquire``: a run asks for a slot for one job round (``key`` = ``<job>#<round>``)."""

    holder: str
    key: str
    # The tenant's cap as the run knows it (the newest request's value applies).
    limit: int
    # The task queue the job's activity goes to: granted only while a CI worker polls it.
    # Empty (a run of an older build): granted as before, without asking.
    queue: str = ""
    # Where the semaphore asks whether ``queue`` is polled (``queues.ci_probe_queue``).
    probe_queue: str = ""
    # Set by the semaphore once it told the run this request waits on an unserved queue.
    told_unserved: bool = False
    # When the semaphore received it (set by the semaphore).
    asked_at: datetime | None = None


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
    """Signal ``slots_granted`` to a run: every grant of one semaphore round for that run (and
    ``slots_unserved``: its requests found waiting on a queue no worker polls)."""

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
    # Job queues a probe found polled, and when (workflow time): requests for them are granted
    # without asking again until ``SERVED_FRESH`` has passed.
    served: dict[str, datetime] = Field(default_factory=dict)
    # Job queues the last probe found unpolled, with when they were first found so (the next
    # probe comes sooner for a queue that only just lost its workers). Their requests hold no
    # slot and wait; the tenant's other requests are granted past them.
    unserved: dict[str, datetime] = Field(default_factory=dict)
    # When each unserved queue was last probed.
    probed: dict[str, datetime] = Field(default_factory=dict)
    probes_total: int = 0
    # The CI workers' probe queue (from the newest request that names one).
    probe_queue: str = ""
    # A request whose queue stays unserved this long (from when it asked or its queue lost its
    # workers, the later) is dropped and its run told (``slots_expired``): the job fails as it
    # did when its activity waited that long for a worker (CI_JOB_SCHEDULE_TO_START_SECONDS).
    unserved_expiry_seconds: float = 24 * 3600.0


class ServedQueuesInput(BaseModel):
    """Activity ``ci_served_queues``: which of these job queues a CI worker polls now."""

    queues: list[str]


class ServedQueues(BaseModel):
    """The queues of the input that have pollers (``DescribeTaskQueue``); a queue the engine
    could not describe counts as unserved (asked again soon)."""

    served: list[str] = Field(default_factory=list)
