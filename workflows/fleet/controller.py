"""``FleetWorkflow``: sizes the GPU fleet, forever.

Contract:

* Start: workflow id ``fleet_workflow_id(prefix)``, task queue ``fleet_queue(prefix)`` (the
  ``leasehold fleet run`` process, which holds the provider), input ``FleetInput``.
* Each tick: ``observe_fleet`` (demand from the capacity tracker's publication, workers from
  the queues), ``workflows.fleet.sizing.decide``, then ``apply_fleet`` (the provider starts
  workers, or drains and retires them: the chosen worker gets the preemption notice, so it
  stops polling, checkpoints, hands its job back and exits). Every decision that changed the
  fleet is kept (the latest ``FLEET_DECISIONS_KEPT``) and logged with its inputs; ``state``
  answers them and the latest tick, whatever it decided.
* ``configure`` (signal) replaces the spec from the next tick on.
* Continues as new every ``spec.ticks_per_run`` ticks, carrying the shrink streaks and the
  latest decisions, onto the deployment's current build (auto-upgrade: a controller runs for
  ever, so a new build reaches it at its next run); it never ends by itself.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.fleet.definitions import FleetObservationDefinition, FleetProviderDefinition
    from workflows.fleet.sizing import cost_per_hour, decide
    from workflows.fleet.types import (
        ApplyFleetInput,
        Decision,
        FleetInput,
        FleetObservation,
        FleetSpec,
        FleetState,
    )
    from workflows.queues import (
        FLEET_APPLY_HEARTBEAT,
        FLEET_APPLY_RETRY,
        FLEET_APPLY_TIMEOUT,
        FLEET_DECISIONS_KEPT,
        FLEET_OBSERVE_RETRY,
        FLEET_OBSERVE_TIMEOUT,
    )


def fleet_workflow_id(prefix: str = "") -> str:
    """One controller per deployment (its queue prefix names it)."""
    return f"{prefix}fleet-controller"


@workflow.defn
class FleetWorkflow:
    """Observes, decides and applies every ``tick_seconds``; see the module docstring."""

    @workflow.init
    def __init__(self, input: FleetInput) -> None:
        self._spec = input.spec
        self._decisions = list(input.decisions)
        self._ticks = input.ticks
        self._last: Decision | None = None

    @workflow.query
    def state(self) -> FleetState:
        return FleetState(spec=self._spec, decisions=self._decisions, ticks=self._ticks, last=self._last)

    @workflow.signal
    def configure(self, spec: FleetSpec) -> None:
        """A new spec (pools, bounds, ceiling) from the next tick on."""
        self._spec = spec

    @workflow.run
    async def run(self, input: FleetInput) -> None:
        shrinking = dict(input.shrinking)
        # The provider's own count after the last apply: a worker that is still loading its
        # model neither polls nor runs a job, so the queues would not show it yet.
        current: dict[str, int] = {}
        for _ in range(self._spec.ticks_per_run):
            spec = self._spec
            observation = await workflow.execute_activity_method(
                FleetObservationDefinition.observe_fleet,
                spec,
                start_to_close_timeout=FLEET_OBSERVE_TIMEOUT,
                retry_policy=FLEET_OBSERVE_RETRY,
            )
            if not current:
                current = {k: len(w.idle) + len(w.busy) for k, w in observation.workers.items()}
            decisions, shrinking = decide(spec, observation, current, shrinking)
            desired = {d.key: d.desired for d in decisions}
            decision = Decision(at=workflow.now(), pools=decisions, cost_per_hour=cost_per_hour(spec, desired))
            try:
                applied = await workflow.execute_activity_method(
                    FleetProviderDefinition.apply_fleet,
                    ApplyFleetInput(spec=spec, desired=desired, idle=_idle(observation)),
                    start_to_close_timeout=FLEET_APPLY_TIMEOUT,
                    heartbeat_timeout=FLEET_APPLY_HEARTBEAT,
                    retry_policy=FLEET_APPLY_RETRY,
                )
                decision.started, decision.retired = applied.started, applied.retired
                current = applied.running
            except ActivityError as err:
                # The next tick decides again from what it observes: a provider outage must
                # not end the controller.
                decision.error = str(err.cause or err)
            self._record(decision)
            self._ticks += 1
            await workflow.sleep(timedelta(seconds=spec.tick_seconds))
        workflow.continue_as_new(
            FleetInput(spec=self._spec, shrinking=shrinking, decisions=self._decisions, ticks=self._ticks),
            # Each run is pinned to its build; the next one starts on the deployment's current build.
            initial_versioning_behavior=workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE,
        )

    def _record(self, decision: Decision) -> None:
        # Every tick is the latest; only ticks that changed something (or failed) are kept, so
        # the log still shows the last burst after hours without one.
        self._last = decision
        changed = [d for d in decision.pools if d.desired != d.current]
        if changed or decision.error or decision.started or decision.retired:
            self._decisions = [*self._decisions, decision][-FLEET_DECISIONS_KEPT:]
            workflow.logger.info(
                "fleet: %s%s",
                "; ".join(f"{d.key} {d.current}->{d.desired} ({d.reason}) {d.inputs}" for d in changed) or "no change",
                f"; provider error: {decision.error}" if decision.error else "",
            )


def _idle(observation: FleetObservation) -> dict[str, list[str]]:
    return {key: workers.idle for key, workers in observation.workers.items()}
