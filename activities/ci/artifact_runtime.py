"""How an attempt's sandboxed processes reach its artifact service (``activities.ci.artifact_service``).

``attach_artifacts`` starts the service for an attempt that needs one: the bubblewrap sandbox
(the only backend that takes host binds), a database to record artifacts in, and a job with an
action step (only actions talk to the results service; ``run:`` steps cost nothing extra).
Every process the step runner starts then runs under ``runtime_forwarder.py`` with the socket
and the forwarder bound in at ``/run/leasehold`` and ``ACTIONS_RESULTS_URL`` /
``ACTIONS_RUNTIME_TOKEN`` in its environment.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import sessionmaker

from activities.ci.artifact_service import RUNTIME_PORT, ArtifactScope, ArtifactService
from leasehold.records.ci.plans import log_retention_days
from leasehold.storage import ObjectStore
from workflows.ci.types.spec import JobSpec

INSIDE = "/run/leasehold"
FORWARDER = Path(__file__).with_name("runtime_forwarder.py")
# The job-side Python (the sandbox's own, as for the job-side helper).
PYTHON = "/usr/bin/python3"
BUILTIN_PREFIXES = ("actions/checkout@", "actions/cache@", "actions/cache/")


@dataclass(frozen=True)
class RuntimeBinding:
    socket: Path
    env: dict[str, str]

    def binds(self) -> tuple[tuple[str, str], ...]:
        return ((str(self.socket), f"{INSIDE}/results.sock"), (str(FORWARDER), f"{INSIDE}/forward.py"))

    def wrap(self, argv: list[str]) -> list[str]:
        return [PYTHON, f"{INSIDE}/forward.py", f"{RUNTIME_PORT}={INSIDE}/results.sock", "--", *argv]


def needs_artifacts(job: JobSpec) -> bool:
    return any(s.uses and not s.uses.startswith(BUILTIN_PREFIXES) for s in job.steps)


def attach_artifacts(
    runtime_dir: Path | None,
    sandbox_name: str,
    db: sessionmaker | None,
    store: ObjectStore,
    scope: ArtifactScope,
    job: JobSpec,
) -> tuple[ArtifactService, RuntimeBinding] | None:
    """The attempt's running service and its binding, or None when the attempt gets none."""
    if runtime_dir is None or db is None or sandbox_name != "bubblewrap" or not needs_artifacts(job):
        return None
    days = log_retention_days(db, scope.tenant_id) or scope.retention_days
    scope = dataclasses.replace(scope, retention_days=days)
    name = os.urandom(6).hex()
    service = ArtifactService(runtime_dir / f"{name}.sock", runtime_dir / f"{name}.spool", scope, store, db).start()
    return service, RuntimeBinding(service.socket_path, service.env())
