"""``CIConcurrencyGroupWorkflow``: one ``concurrency:`` group of one tenant, GitHub's semantics.

One workflow per tenant and group (id ``ci-concurrency:<tenant>:<sha256 of the group>``: the
tenant comes from the push's verified context, so a tenant can only ever name its own groups,
whatever text its group expression yields). A member is a whole run (workflow-level
``concurrency``) or one job round (job-level). At most one member runs and one waits:

* a request finds the group free: it is granted at once;
* a request finds a member pending: that older pending member is told ``superseded`` (its run
  cancels it) and the new one waits in its place;
* a request with ``cancel-in-progress`` finds a member running: the running one is told
  ``preempted`` (its run cancels it) and the new one is granted once that one releases.

Members release on every way out (the run's ``finally``); a member whose run is gone is freed
when telling it fails. State lives in this workflow's history, so a worker restart loses
nothing. The workflow ends after an idle hour (the next request starts it again) and continues
as new before its history grows large.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from workflows.ci.semaphore import rollover_due
    from workflows.ci.types.concurrency import GroupNotice, GroupOutcome, GroupRelease, GroupRequest, GroupState

GROUP_PREFIX = "ci-concurrency:"
SIGNAL_GROUP_ACQUIRE = "group_acquire"
SIGNAL_GROUP_RELEASE = "group_release"
SIGNAL_GROUP_NOTICE = "group_notice"
MAX_HISTORY_EVENTS = 2000
IDLE_EXIT = timedelta(hours=1)
# Longest group name kept (GitHub's own limit is 400 characters).
MAX_GROUP_CHARS = 400


def group_workflow_id(tenant_id: str, group: str) -> str:
    """Hashed: a group is any text a tenant's expression yields; the id must stay short and plain."""
    return f"{GROUP_PREFIX}{tenant_id}:{hashlib.sha256(group.encode()).hexdigest()[:40]}"


def _same(a: GroupRequest | None, holder: str, key: str) -> bool:
    return a is not None and a.holder == holder and a.key == key


# Pinned (the orchestration worker's default) between rollovers, like the tenant semaphore:
# each continue-as-new starts on the deployment's current build, and a new current build makes
# it roll over at its next task.
@workflow.defn
class CIConcurrencyGroupWorkflow:
    """See the module docstring."""

    @workflow.init
    def __init__(self, state: GroupState) -> None:
        self._state = state
        self._dirty = True
        # Notices to signal (signal handlers cannot await): (holder, notice).
        self._notify: list[tuple[str, GroupNotice]] = []

    @workflow.query
    def state(self) -> GroupState:
        return self._state

    def _tell(self, req: GroupRequest, outcome: GroupOutcome) -> None:
        self._notify.append((req.holder, GroupNotice(key=req.key, outcome=outcome, group=self._state.group)))

    def _grant_pending(self) -> None:
        """The group is free and a member waits: it runs now."""
        st = self._state
        if st.running is None and st.pending is not None:
            st.running, st.pending = st.pending, None
            st.granted_total += 1
            self._tell(st.running, GroupOutcome.GRANTED)

    @workflow.signal(name=SIGNAL_GROUP_ACQUIRE)
    def acquire(self, req: GroupRequest) -> None:
        st = self._state
        # A free group with a waiter is a waiter not granted yet: signals are applied before the
        # run method's first step, so a request delivered in the group's first task finds the
        # member the group was started with still pending. It came first, so it runs, and this
        # request waits behind it.
        self._grant_pending()
        if _same(st.running, req.holder, req.key):
            # A repeated request (a signal delivered again): tell it again.
            self._tell(req, GroupOutcome.GRANTED)
        elif not _same(st.pending, req.holder, req.key):
            if st.pending is not None:
                self._tell(st.pending, GroupOutcome.SUPERSEDED)
            st.pending = req
            if st.running is not None and req.cancel_in_progress:
                self._tell(st.running, GroupOutcome.PREEMPTED)
        self._dirty = True

    @workflow.signal(name=SIGNAL_GROUP_RELEASE)
    def release(self, rel: GroupRelease) -> None:
        st = self._state
        if _same(st.running, rel.holder, rel.key):
            st.running = None
        if _same(st.pending, rel.holder, rel.key):
            st.pending = None
        self._dirty = True

    @workflow.run
    async def run(self, state: GroupState) -> None:
        started = True
        while True:
            self._dirty = False
            self._grant_pending()
            while self._notify:
                await self._send(*self._notify.pop(0))
            # The running and pending members carry over.
            if rollover_due(started, MAX_HISTORY_EVENTS):
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(
                    self._state, initial_versioning_behavior=workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE
                )
            started = False
            if self._dirty:
                continue
            try:
                await workflow.wait_condition(lambda: self._dirty, timeout=IDLE_EXIT)
            except TimeoutError:
                if self._state.running is None and self._state.pending is None and not self._dirty:
                    break
        await workflow.wait_condition(workflow.all_handlers_finished)

    async def _send(self, holder: str, notice: GroupNotice) -> None:
        try:
            await workflow.get_external_workflow_handle(holder).signal(SIGNAL_GROUP_NOTICE, notice)
        except FailureError:
            # The run is gone (closed or terminated): it must not keep the group.
            workflow.logger.warning("run %s is gone; freeing its place %s", holder, notice.key)
            self.release(GroupRelease(holder=holder, key=notice.key))
