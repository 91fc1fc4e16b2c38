"""What the console shows of the fleet controller: its latest decisions, newest first.

Pool-level figures only (the same aggregates ``/v1/capacity`` publishes): which workers were
retired, their hosts and process ids, stay with operators (``leasehold fleet decisions``).
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel
from temporalio.client import Client
from temporalio.service import RPCError

from workflows.fleet.controller import FleetWorkflow, fleet_workflow_id
from workflows.fleet.types import PoolDecision

RPC_TIMEOUT = timedelta(seconds=5)
SHOWN = 20


class DecisionView(BaseModel):
    """One tick of the controller as the console lists it."""

    at: str
    cost_per_hour: float
    pools: list[PoolDecision]
    started: dict[str, int]
    retired: dict[str, int]
    error: str | None


async def fleet_decisions(client: Client, prefix: str) -> list[DecisionView] | None:
    """The latest decisions that changed something (or failed), newest first; ``None`` when no
    controller runs for this deployment."""
    handle = client.get_workflow_handle(fleet_workflow_id(prefix))
    try:
        state = await handle.query(FleetWorkflow.state, rpc_timeout=RPC_TIMEOUT)
    except RPCError:
        return None
    views = [
        DecisionView(
            at=f"{d.at:%Y-%m-%d %H:%M:%S} UTC",
            cost_per_hour=round(d.cost_per_hour, 3),
            pools=d.pools,
            started=d.started,
            retired={key: len(names) for key, names in d.retired.items()},
            error=d.error,
        )
        for d in state.decisions
    ]
    return list(reversed(views))[:SHOWN]
