"""Fixtures of the foundation tests: an S3-protocol server (moto, over real HTTP) and Postgres."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import in_ci
from tests.s3_server import moto_s3

POSTGRES_URLS = (
    "postgresql+psycopg2://postgres@127.0.0.1:5432/test",
    "postgresql+psycopg2://root@127.0.0.1:5432/test",
)


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3 server as a real subprocess on a free loopback port."""
    with moto_s3(tmp_path_factory.mktemp("moto") / "moto.log") as endpoint:
        yield endpoint


def _postgres_base_url() -> str | None:
    from sqlalchemy import create_engine, text

    for url in POSTGRES_URLS:
        engine = create_engine(url, connect_args={"connect_timeout": 3})
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            return url
        except Exception:
            continue
        finally:
            engine.dispose()
    return None


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A database URL whose tables live in a fresh schema, dropped afterwards.

    Skips when no Postgres answers on 127.0.0.1:5432, except under CI=true, where it fails.
    """
    from sqlalchemy import create_engine, text

    base = _postgres_base_url()
    if base is None:
        if in_ci():
            pytest.fail("Postgres on 127.0.0.1:5432 (database 'test') is required under CI=true")
        pytest.skip("no Postgres on 127.0.0.1:5432")
    schema = f"lh_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        # libpq's options set the search path, so create_all and every query use the schema.
        yield f"{base}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'leasehold.db'}"
