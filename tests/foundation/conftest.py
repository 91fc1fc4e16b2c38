"""Fixtures of the foundation tests: an S3-protocol server (moto, over real HTTP).

Postgres (``postgres_url``) and ``sqlite_url`` live in ``tests/conftest.py``: every package's
database tests use them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.s3_server import moto_s3


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3 server as a real subprocess on a free loopback port."""
    with moto_s3(tmp_path_factory.mktemp("moto") / "moto.log") as endpoint:
        yield endpoint
