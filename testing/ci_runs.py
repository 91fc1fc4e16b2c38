"""A CI run's input as a push makes it, for tests and benchmarks that start ``CIRunWorkflow``
directly on a dev server (no push workflow, no git, no API)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from workflows.ci.types.push import PushContext
from workflows.ci.types.run import CIRunInput
from workflows.ci.types.spec import JobSpec, WorkflowSpec


def run_input(prefix: str, jobs: list[JobSpec], **push: Any) -> CIRunInput:
    """A run of ``jobs`` on the task queues of ``prefix`` (tenant ``<prefix>tenant``, a 30 s
    heartbeat timeout and a 1 s retry window unless ``push`` says otherwise: it sets or
    replaces any ``PushContext`` field)."""
    context: dict[str, Any] = {
        "tenant_id": f"{prefix}tenant",
        "repo_id": "repo",
        "repo_full_name": "o/r",
        "clone_url": "/nowhere",
        "commit_sha": "0" * 40,
        "ref": "refs/heads/main",
        "queue_prefix": prefix,
        "heartbeat_timeout_seconds": 30.0,
        "retry_window_seconds": 1.0,
    }
    return CIRunInput(
        push=PushContext(**{**context, **push}),
        run_id=f"run_{uuid.uuid4().hex[:24]}",
        workflow_path=".github/workflows/ci.yml",
        created_at=datetime.now(UTC),
        spec=WorkflowSpec(path="ci.yml", name="ci", jobs=jobs),
    )
