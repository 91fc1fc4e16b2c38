"""One multi-tenant CI stack for the package: the API, an orchestration worker and a CI worker
(real bubblewrap) as real processes against the session's dev server. Tests isolate themselves
by tenant and repository; two tenants per test where isolation is the point."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from leasehold.database import init_database
from leasehold.devserver import free_port
from leasehold.settings import Settings
from tests.ci_api.conftest import CIStack
from tests.harness import start_api, start_worker, unique_prefix


@pytest.fixture(scope="package")
def tenancy(temporal_env, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CIStack]:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("ci-tenancy")
    logs = root / "logs"
    logs.mkdir()
    settings = Settings(
        data_dir=root / "data",
        temporal_address=temporal_env.client.service_client.config.target_host,
        queue_prefix=unique_prefix(),
        api_port=free_port(),
        ci_labels=["linux"],
        ci_heartbeat_timeout_seconds=5.0,
        ci_cancel_grace_seconds=2.0,
        ci_max_concurrent_jobs=2,
    )
    settings.data_dir.mkdir(parents=True)
    init_database(settings.resolved_database_url)
    api, base_url = start_api(settings, logs)
    stack = CIStack(settings=settings, base_url=base_url, logs=logs, root=root, api=api)
    try:
        stack.workers.append(start_worker(settings, "orchestration", logs))
        stack.workers.append(start_worker(settings, "ci", logs, "--labels", "linux"))
        for proc in [api, *stack.workers]:
            proc.wait_healthy(60)
        yield stack
    finally:
        for proc in [*stack.workers, api]:
            proc.stop()
