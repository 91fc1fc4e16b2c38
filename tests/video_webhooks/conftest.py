from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.video_webhooks.stack import Receiver, Stack


@pytest.fixture(scope="package")
def stack(previews_webhooks_stack: Stack) -> Stack:
    return previews_webhooks_stack


@pytest.fixture(scope="package")
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    try:
        yield server
    finally:
        server.close()
