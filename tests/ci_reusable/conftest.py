"""The CI API stack (API, orchestration and CI workers, real git remotes with webhooks) of
``tests.ci_api``, started once for this package, with a directory of mirrors as its actions
source: tests write the other repositories whose workflows they call there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.ci_api.conftest import CIStack, ci_engine, running_ci_stack

__all__ = ["action_mirrors", "ci_engine", "ci_stack"]


@pytest.fixture(scope="package")
def action_mirrors(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``<dir>/<owner>/<repo>``: the operator's actions source of this package's stack."""
    return tmp_path_factory.mktemp("action-mirrors")


@pytest.fixture(scope="package")
def ci_stack(
    temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory, action_mirrors: Path
) -> Iterator[CIStack]:
    root = tmp_path_factory.mktemp("ci-reusable")
    with running_ci_stack(temporal_env, root, ci_actions_source=str(action_mirrors)) as stack:
        yield stack
