"""``write_versioned`` on SQLite and Postgres: a newer write applies, an older or equal one is
ignored, and any order of retried, duplicated and concurrent writes converges on the newest."""

from __future__ import annotations

import itertools
import random
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Table, select
from sqlalchemy.orm import sessionmaker

from leasehold.database import init_database
from leasehold.records.ci.runs import CIPushRecord
from leasehold.records.versioned import write_versioned
from tests.conftest import sqlite_url

PUSHES: Table = CIPushRecord.__table__  # type: ignore[assignment]
# The lifecycle's version (expiry, retention): above anything an engine history can reach.
LIFECYCLE_VERSION = 2**62


@pytest.fixture(params=["sqlite", "postgres"])
def factory(request: pytest.FixtureRequest, tmp_path: Path) -> sessionmaker:
    if request.param == "sqlite":
        return init_database(sqlite_url(tmp_path))
    return init_database(request.getfixturevalue("postgres_url"))


def push_values(status: str, note: str) -> dict[str, Any]:
    """The columns of one push snapshot; ``note`` makes each snapshot's state distinct."""
    return {
        "tenant_id": "acme",
        "repo_id": "repo_1",
        "commit_sha": "a" * 40,
        "ref": "refs/heads/main",
        "status": status,
        "received_at": datetime(2026, 12, 1, tzinfo=UTC),
        "state": {"status": status, "note": note},
    }


def write(factory: sessionmaker, push_id: str, version: int, status: str, note: str = "") -> bool:
    """One write in its own transaction, as an activity attempt makes it."""
    with factory.begin() as session:
        return write_versioned(session, PUSHES, {"push_id": push_id}, push_values(status, note), version)


def row(factory: sessionmaker, push_id: str) -> tuple[int, str, dict[str, Any]]:
    with factory() as session:
        found = session.execute(
            select(PUSHES.c.version, PUSHES.c.status, PUSHES.c.state).where(PUSHES.c.push_id == push_id)
        ).one()
    return found.version, found.status, found.state


def test_newer_applies_older_and_equal_are_ignored(factory: sessionmaker) -> None:
    assert write(factory, "p1", 0, "queued")  # absent: inserted
    assert write(factory, "p1", 7, "running")
    assert row(factory, "p1") == (7, "running", {"status": "running", "note": ""})
    assert not write(factory, "p1", 3, "queued")  # older
    assert not write(factory, "p1", 7, "failed", "same version, other body")  # equal
    assert row(factory, "p1") == (7, "running", {"status": "running", "note": ""})
    assert write(factory, "p1", 12, "succeeded")
    assert row(factory, "p1")[:2] == (12, "succeeded")
    # An absent row takes any version, even an old one.
    assert write(factory, "p2", 5, "running")
    assert row(factory, "p2")[:2] == (5, "running")


def test_the_lifecycle_version_outranks_every_engine_write(factory: sessionmaker) -> None:
    assert write(factory, "p1", 40, "succeeded")
    assert write(factory, "p1", LIFECYCLE_VERSION, "expired")
    assert not write(factory, "p1", 10**9, "running")  # a late snapshot from the engine
    assert row(factory, "p1")[:2] == (LIFECYCLE_VERSION, "expired")


def test_every_order_of_writes_applied_twice_converges(factory: sessionmaker) -> None:
    # The API's accept (version 0), then snapshots at growing history lengths.
    writes = [(0, "queued"), (5, "running"), (9, "running"), (14, "succeeded")]
    newest = max(writes)
    results = []
    for n, order in enumerate(itertools.permutations(writes)):
        push_id = f"perm-{n}"
        # Each permutation, then the same writes again (retries and duplicates) in another order.
        for version, status in [*order, *reversed(order)]:
            write(factory, push_id, version, status, note=f"v{version}")
        results.append(row(factory, push_id))
    assert len(results) == 24
    assert set(map(repr, results)) == {repr((newest[0], newest[1], {"status": newest[1], "note": f"v{newest[0]}"}))}


def test_concurrent_writers_leave_the_newest_version(factory: sessionmaker) -> None:
    threads, per_thread, keys = 6, 8, 3
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []
    applied: list[tuple[str, int]] = []
    lock = threading.Lock()

    def writer(index: int) -> None:
        # Thread i owns versions i, i + threads, ...: together they cover 0 .. threads*per_thread-1,
        # each thread in its own random order, all racing on the same absent rows first.
        versions = [index + threads * k for k in range(per_thread)]
        random.Random(index).shuffle(versions)
        try:
            barrier.wait(timeout=30)
            for version in versions:
                for key in range(keys):
                    if write(factory, f"race-{key}", version, "running", note=f"v{version}"):
                        with lock:
                            applied.append((f"race-{key}", version))
        except BaseException as exc:  # reported below: a thread's exception would otherwise vanish
            errors.append(exc)

    pool = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(timeout=120)
    assert not errors, errors
    newest = threads * per_thread - 1
    for key in range(keys):
        assert row(factory, f"race-{key}") == (newest, "running", {"status": "running", "note": f"v{newest}"})
        # The newest write is applied exactly once, whoever raced it; no write applied twice.
        mine = [v for k, v in applied if k == f"race-{key}"]
        assert mine.count(newest) == 1
        assert len(mine) == len(set(mine))
