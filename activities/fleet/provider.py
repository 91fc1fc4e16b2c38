"""What the fleet controller needs of wherever its GPU workers run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from workflows.fleet.types import FleetPool


class FleetProvider(Protocol):
    """Starts and retires the GPU workers of each pool.

    ``retire`` must drain before it retires: the chosen worker gets the preemption notice
    (SIGTERM), so it stops polling, checkpoints its job at once, hands it back and exits.
    Workers whose identity is in ``idle`` go first.
    """

    def running(self, pool: FleetPool) -> int: ...

    def start(self, pool: FleetPool, count: int) -> int: ...

    def retire(self, pool: FleetPool, count: int, idle: list[str], beat: Callable[[], None]) -> list[str]: ...

    def close(self) -> None: ...
