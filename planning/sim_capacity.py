"""What admission asks of the measured capacity, answered from a simulation
(``video_policy.admission.CapacityView``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from planning.sim_state import SimWaitingUsers
from video_policy.eta import ModelSnapshot

if TYPE_CHECKING:
    from planning.engine import Simulation


@dataclass(frozen=True)
class SimulatedPool:
    """What ``admit`` reads of a tracker's pool: its key and how messages name it."""

    key: str

    @property
    def label(self) -> str:
        return self.key


class SimulatedCapacity:
    """What ``admit`` asks a ``CapacityTracker``, answered from the simulation."""

    def __init__(self, sim: Simulation) -> None:
        self._sim = sim

    @property
    def pools(self) -> dict[str, SimulatedPool]:
        # Each simulated queue is one pool, keyed as ``admit`` looks it up without a class.
        return {name: SimulatedPool(name) for name in self._sim.queues}

    @property
    def snapshots(self) -> dict[str, ModelSnapshot]:
        return {name: q.snapshot for name, q in self._sim.queues.items()}

    def active_users(self, model: str, tier: str) -> SimWaitingUsers:
        return SimWaitingUsers(self._sim.queues[model].waiting_users[tier])

    def tier_weight(self, tier: str) -> float:
        settings = self._sim.settings
        return settings.video_paid_weight if tier == "paid" else settings.video_free_weight

    def expected_wait(self, model: str, tier: str, weight: float) -> float | None:
        # The estimate of the latest refresh (the tracker re-places per submit; between two
        # refreshes the simulated queue moves by a refresh's worth of events).
        return self._sim.queues[model].expected.get(tier)
