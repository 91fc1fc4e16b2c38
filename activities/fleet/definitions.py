"""The fleet controller's activities, as definitions: registered name, input and result.

The implementations talk to the database, the Temporal service and a provider (processes,
Kubernetes); the workflow loads only these definitions. The names never change.
"""

from __future__ import annotations

from temporalio import activity

from workflows.fleet.types import ApplyFleetInput, ApplyFleetResult, FleetObservation, FleetSpec

OBSERVE_FLEET = "observe_fleet"
APPLY_FLEET = "apply_fleet"


class FleetObservationDefinition:
    """Implemented by ``activities.fleet.observation.FleetObserver``."""

    @activity.defn(name=OBSERVE_FLEET)
    async def observe_fleet(self, input: FleetSpec) -> FleetObservation:
        """Demand per model version and class, and live workers per pool."""
        raise NotImplementedError


class FleetProviderDefinition:
    """Implemented by ``activities.fleet.actuation.FleetActuator``."""

    @activity.defn(name=APPLY_FLEET)
    def apply_fleet(self, input: ApplyFleetInput) -> ApplyFleetResult:
        """Bring each pool to its desired size: start workers, or drain and retire them."""
        raise NotImplementedError
