from __future__ import annotations

import pytest

from tests.video_webhooks.stack import Stack


@pytest.fixture(scope="package")
def stack(previews_webhooks_stack: Stack) -> Stack:
    return previews_webhooks_stack
