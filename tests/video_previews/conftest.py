from __future__ import annotations

from typing import Any

import pytest

from tests.video_webhooks.stack import Stack, issue15_stack


@pytest.fixture(scope="session")
def stack(temporal_env: Any, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Stack:
    return issue15_stack(temporal_env, tmp_path_factory, request)
