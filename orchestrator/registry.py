"""What the orchestration worker hosts: workflows and light (non-GPU, non-sandbox) activities.

Each product adds its workflows and an activity factory here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from leasehold.settings import Settings

# Workflow classes, imported lazily by the worker.
WORKFLOWS: list[type] = []

# Factories that turn settings into activity callables (constructor injection).
ACTIVITY_FACTORIES: list[Callable[[Settings], list[Callable[..., Any]]]] = []


def _video_activities(settings: Settings) -> list[Callable[..., Any]]:
    from activities.video.housekeeping import VideoHousekeepingActivities
    from leasehold.storage import open_store

    return [VideoHousekeepingActivities(open_store(settings)).delete_video_objects]


def _register_video() -> None:
    from workflows.video.job import VideoJobWorkflow

    WORKFLOWS.append(VideoJobWorkflow)
    ACTIVITY_FACTORIES.append(_video_activities)


_register_video()


def _register_ci() -> None:
    from workflows.ci.push import CIPushWorkflow
    from workflows.ci.run import CIRunWorkflow

    WORKFLOWS.extend([CIPushWorkflow, CIRunWorkflow])


_register_ci()


def _register_ci_tenancy() -> None:
    from workflows.ci.semaphore import CITenantSemaphoreWorkflow

    WORKFLOWS.append(CITenantSemaphoreWorkflow)


_register_ci_tenancy()


def _register_ci_reconcile() -> None:
    from workflows.ci.reconcile import CIReconcileWorkflow

    WORKFLOWS.append(CIReconcileWorkflow)


_register_ci_reconcile()
