"""One CI stack for the package: the API, an orchestration worker and a CI worker serving
``linux``, real processes against the session's dev server. The deployment lists a worker pool
(``big+linux``) that has no worker up, so the label sets a tenant is shown as served come from
its own jobs only; tests isolate themselves by tenant."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ci_api.conftest import CIStack, running_ci_stack


@pytest.fixture(scope="package")
def queue_stack(temporal_env, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CIStack]:  # type: ignore[no-untyped-def]
    with running_ci_stack(
        temporal_env, tmp_path_factory.mktemp("ci-queue"), ci_queue_label_sets=["linux+big"], ci_queue_cache_seconds=1.0
    ) as stack:
        stack.start_workers()
        yield stack
