"""``apply_fleet``: bring every pool to its desired size through the provider."""

from __future__ import annotations

from temporalio import activity

from activities.fleet.definitions import FleetProviderDefinition
from activities.fleet.provider import FleetProvider
from workflows.fleet.types import ApplyFleetInput, ApplyFleetResult


class FleetActuator(FleetProviderDefinition):
    """The provider the ``leasehold fleet run`` process was started with."""

    def __init__(self, provider: FleetProvider) -> None:
        self.provider = provider

    @activity.defn(name="apply_fleet")
    def apply_fleet(self, input: ApplyFleetInput) -> ApplyFleetResult:
        result = ApplyFleetResult()
        for pool in input.spec.pools:
            want = input.desired.get(pool.key)
            if want is None:
                continue
            have = self.provider.running(pool)
            if want > have:
                result.started[pool.key] = self.provider.start(pool, want - have)
            elif want < have:
                result.retired[pool.key] = self.provider.retire(
                    pool, have - want, input.idle.get(pool.key, []), activity.heartbeat
                )
            result.running[pool.key] = self.provider.running(pool)
        return result
