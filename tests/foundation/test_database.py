"""API keys in a real database, SQLite and Postgres: hashed at rest, revocable, mapped to a principal."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.orm import sessionmaker

from leasehold.database import init_database, ping
from leasehold.records.api_keys import ApiKey, Principal, create_key, lookup
from tests.conftest import sqlite_url


@pytest.fixture(params=["sqlite", "postgres"])
def factory(request: pytest.FixtureRequest, tmp_path: Path) -> sessionmaker:
    if request.param == "sqlite":
        url = sqlite_url(tmp_path)
    else:
        url = request.getfixturevalue("postgres_url")
    return init_database(url)


def test_create_and_lookup(factory: sessionmaker) -> None:
    ping(factory)
    paid = create_key(factory, "acme", "alice", "paid")
    free = create_key(factory, "acme", "bob", "free")
    assert paid != free
    p = lookup(factory, paid)
    assert isinstance(p, Principal)
    assert (p.tenant_id, p.user_id, p.tier) == ("acme", "alice", "paid")
    f = lookup(factory, free)
    assert f is not None
    assert (f.tenant_id, f.user_id, f.tier) == ("acme", "bob", "free")
    assert p.key_id != f.key_id


def test_wrong_and_malformed_keys(factory: sessionmaker) -> None:
    key = create_key(factory, "acme", "alice", "paid")
    assert lookup(factory, key[:-1] + ("A" if key[-1] != "A" else "B")) is None
    assert lookup(factory, "") is None
    assert lookup(factory, "not-a-leasehold-key") is None
    assert lookup(factory, key + "x" * 300) is None


def test_revoked_key_is_refused(factory: sessionmaker) -> None:
    key = create_key(factory, "acme", "alice", "paid")
    principal = lookup(factory, key)
    assert principal is not None
    with factory.begin() as session:
        session.execute(update(ApiKey).where(ApiKey.id == principal.key_id).values(revoked_at=datetime.now(UTC)))
    assert lookup(factory, key) is None


def test_only_the_hash_is_stored(factory: sessionmaker) -> None:
    key = create_key(factory, "acme", "alice", "paid")
    secret_part = key.split("_", 2)[2]  # the random part after "lh_<key id>_" (it may hold "_")
    assert len(secret_part) >= 40
    with factory() as session:
        rows = session.execute(select(ApiKey)).scalars().all()
        # Every column of every row, as the database returns it.
        raw = session.execute(text("SELECT * FROM api_keys")).all()
    assert len(rows) == 1
    assert rows[0].key_hash == hashlib.sha256(key.encode()).hexdigest()
    dumped = repr(raw)
    assert key not in dumped
    assert secret_part not in dumped


def test_sqlite_file_never_holds_the_plaintext(tmp_path: Path) -> None:
    factory = init_database(sqlite_url(tmp_path))
    keys = [create_key(factory, "acme", f"user{i}", "free") for i in range(3)]
    factory.kw["bind"].dispose()
    blobs = b"".join(p.read_bytes() for p in tmp_path.glob("leasehold.db*"))
    assert hashlib.sha256(keys[0].encode()).hexdigest().encode() in blobs  # the check can see the data
    for key in keys:
        assert key.encode() not in blobs
        # The random part after "lh_<key id>_" (it may itself contain "_").
        secret = key.split("_", 2)[2]
        assert len(secret) >= 40 and secret.encode() not in blobs


@pytest.mark.parametrize(
    ("tenant", "user", "tier"),
    [("acme", "alice", "gold"), ("", "alice", "paid"), ("acme", "bad name", "free"), ("../x", "u", "paid")],
)
def test_invalid_inputs_rejected(tmp_path: Path, tenant: str, user: str, tier: str) -> None:
    factory = init_database(sqlite_url(tmp_path))
    with pytest.raises(ValueError):
        create_key(factory, tenant, user, tier)
    with factory() as session:
        assert session.execute(select(ApiKey)).first() is None


def test_init_database_is_idempotent(factory: sessionmaker) -> None:
    key = create_key(factory, "acme", "alice", "paid")
    again = init_database(str(factory.kw["bind"].url.render_as_string(hide_password=False)))
    assert lookup(again, key) is not None
