"""One multi-tenant CI stack for the package: the API, an orchestration worker and a CI worker
(real bubblewrap) as real processes against the session's dev server. Tests isolate themselves
by tenant and repository; two tenants per test where isolation is the point."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ci_api.conftest import CIStack, running_ci_stack


@pytest.fixture(scope="package")
def tenancy(temporal_env, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CIStack]:  # type: ignore[no-untyped-def]
    with running_ci_stack(temporal_env, tmp_path_factory.mktemp("ci-tenancy"), ci_max_concurrent_jobs=2) as stack:
        stack.start_workers()
        yield stack
