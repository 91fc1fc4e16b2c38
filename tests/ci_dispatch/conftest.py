"""One CI engine stack for the package: an orchestration worker and a CI worker (real bubblewrap,
overlay checkouts) as processes against the session's dev server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.ci_core.conftest import CIStack, engine_stack


@pytest.fixture(scope="package")
def dispatch_stack(temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CIStack]:
    # Four slots per CI worker: with a second worker, the tenant cap (3), not the workers, binds.
    with engine_stack(temporal_env, tmp_path_factory.mktemp("ci-dispatch"), ci_max_concurrent_jobs=4) as stack:
        yield stack
