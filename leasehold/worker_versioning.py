"""Worker Versioning: the deployment version a worker runs as, and making it current.

A worker of the orchestration process opts into versioned routing: the server hands it only
the workflow tasks of executions that belong to its version, so an execution pinned to an older
build keeps running on that build's workers while new executions start on the current one
(``docs/versioning.md``). A versioned worker gets no task until its version is the
deployment's current (or ramping) one; ``promote`` makes it so.
"""

from __future__ import annotations

import asyncio
import logging
import time

from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
)
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import WorkerDeploymentConfig

from leasehold.settings import Settings

log = logging.getLogger(__name__)

# A new version exists on the server only once one of its workers has polled (a fraction of a
# second after the worker starts); until then promoting it answers NotFound.
PROMOTE_WITHIN_SECONDS = 30.0
PROMOTE_RETRY_SECONDS = 0.2


def deployment_version(settings: Settings, build_id: str) -> WorkerDeploymentVersion:
    """This process's version: the configured deployment and build id (``build_id`` unless the
    settings name another)."""
    return WorkerDeploymentVersion(settings.worker_deployment_name, settings.worker_build_id or build_id)


def deployment_config(settings: Settings, build_id: str, *, routed: bool) -> WorkerDeploymentConfig:
    """The worker's deployment options. ``routed``: the worker hosts workflows and opts into
    versioned routing (when ``worker_versioning`` is on); otherwise it only reports its version.

    Every workflow is pinned to the build that started it, so that is the worker's default
    behaviour rather than a ``versioning_behavior`` on each ``@workflow.defn``: the server
    rejects a workflow task that names a behaviour from a worker not in versioned mode, and the
    same workflows run on unversioned workers too (tests, ``worker_versioning`` off)."""
    versioned = routed and settings.worker_versioning
    return WorkerDeploymentConfig(
        version=deployment_version(settings, build_id),
        use_worker_versioning=versioned,
        default_versioning_behavior=VersioningBehavior.PINNED if versioned else VersioningBehavior.UNSPECIFIED,
    )


async def current_version(client: Client, deployment: str) -> str | None:
    """The build id the deployment routes new executions to, or ``None`` (no deployment yet, or
    none current)."""
    try:
        described = await client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=deployment)
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        if err.status == RPCStatusCode.UNIMPLEMENTED:
            log.error("the Temporal server has no Worker Deployments: set LEASEHOLD_WORKER_VERSIONING=false")
        raise
    current = described.worker_deployment_info.routing_config.current_deployment_version
    return current.build_id or None


async def promote(client: Client, version: WorkerDeploymentVersion, identity: str) -> None:
    """Make ``version`` the deployment's current one (new executions start on it; pinned ones
    stay where they are), once a worker of it has polled. Nothing to do if it is current.

    Raises when the server refuses for good, e.g. the version lacks a task queue the current one
    still polls (a rollout that dropped a queue would strand its workflows)."""
    if await current_version(client, version.deployment_name) == version.build_id:
        return
    deadline = time.monotonic() + PROMOTE_WITHIN_SECONDS
    while True:
        try:
            await client.workflow_service.set_worker_deployment_current_version(
                SetWorkerDeploymentCurrentVersionRequest(
                    namespace=client.namespace,
                    deployment_name=version.deployment_name,
                    build_id=version.build_id,
                    identity=identity,
                )
            )
            log.info("worker deployment %s: current version is now %s", version.deployment_name, version.build_id)
            return
        except RPCError as err:
            # NotFound until the version's first poll registers it; FailedPrecondition while the
            # previous current version's task queues are not all polled by this one yet.
            retryable = err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION)
            if not retryable or time.monotonic() > deadline:
                raise
        await asyncio.sleep(PROMOTE_RETRY_SECONDS)
