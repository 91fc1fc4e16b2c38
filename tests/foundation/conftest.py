"""Fixtures of the foundation tests: an S3-protocol server (moto, over real HTTP) and Postgres."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from leasehold.devserver import free_port
from tests.conftest import in_ci

POSTGRES_URLS = (
    "postgresql+psycopg2://postgres@127.0.0.1:5432/test",
    "postgresql+psycopg2://root@127.0.0.1:5432/test",
)


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3 server as a real subprocess on a free loopback port."""
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"moto server exited:\n{log.read_text()}")
            try:
                httpx.get(endpoint, timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"moto server not up:\n{log.read_text()}") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=10)


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
