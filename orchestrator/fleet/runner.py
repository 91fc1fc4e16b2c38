"""The ``leasehold fleet run`` process: a Temporal worker for ``FleetWorkflow`` and its
activities on ``fleet_queue(prefix)``, holding the provider, and the controller started (or
reconfigured, when it already runs) once connected."""

from __future__ import annotations

import json
import logging
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import ValidationError
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.worker import Worker

from activities.fleet.actuation import FleetActuator
from activities.fleet.observation import FleetObserver
from activities.fleet.provider import FleetProvider
from leasehold.database import init_database
from leasehold.settings import Settings
from leasehold.worker_process import run_worker
from leasehold.worker_versioning import deployment_config
from workflows.fleet.controller import FleetWorkflow, fleet_workflow_id
from workflows.fleet.types import FleetInput, FleetSpec
from workflows.queues import fleet_queue
from workflows.version import BUILD_ID

log = logging.getLogger(__name__)


class FleetConfigError(ValueError):
    """The fleet spec file cannot be read or is not a valid ``FleetSpec`` (one line, naming the field)."""


def load_spec(path: Path) -> FleetSpec:
    """A ``FleetSpec`` from a TOML or JSON file."""
    try:
        text = path.read_text()
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
        return FleetSpec.model_validate(data)
    except OSError as exc:
        raise FleetConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise FleetConfigError(f"{path} is not valid {path.suffix.lstrip('.') or 'JSON'}: {exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "spec"
        raise FleetConfigError(f"{path}: {where}: {first['msg']}") from None


async def start_controller(client: Client, settings: Settings, spec: FleetSpec) -> None:
    """Start the deployment's controller, or hand the running one this spec."""
    handle = await client.start_workflow(
        FleetWorkflow.run,
        FleetInput(spec=spec),
        id=fleet_workflow_id(settings.queue_prefix),
        task_queue=fleet_queue(settings.queue_prefix),
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    await handle.signal(FleetWorkflow.configure, spec)
    log.info("fleet controller %s runs with %d pools", handle.id, len(spec.pools))


def run_fleet(settings: Settings, spec: FleetSpec, provider: FleetProvider) -> None:
    """Serve the controller until SIGTERM; the provider's workers are retired on the way out."""
    import asyncio

    db = init_database(settings.resolved_database_url)
    actuator = FleetActuator(provider)

    def build(client: Client) -> Worker:
        observer = FleetObserver(client, db, settings)
        return Worker(
            client,
            task_queue=fleet_queue(settings.queue_prefix),
            workflows=[FleetWorkflow],
            activities=[observer.observe_fleet, actuator.apply_fleet],
            activity_executor=ThreadPoolExecutor(max_workers=2, thread_name_prefix="fleet"),
            # Versioned like the orchestration workers: each run of the controller is pinned to
            # the build that started it and moves to the current one at continue-as-new.
            deployment_config=deployment_config(settings, BUILD_ID, routed=True),
        )

    async def connected(client: Client) -> None:
        await start_controller(client, settings, spec)

    try:
        asyncio.run(run_worker(settings, "fleet", build, on_connect=connected))
    finally:
        provider.close()
