"""Webhook secrets sealed at rest like CI secrets, on SQLite and Postgres; rows from databases
made before sealing keep verifying webhooks and are sealed when the API starts."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.orm import sessionmaker

from leasehold.clone_urls import ClonePolicy
from leasehold.database import init_database, make_engine
from leasehold.records.ci.repos import (
    Repository,
    RepoWebhookSecret,
    add_repo,
    bind_keyring,
    rotate_webhook_secrets,
    seal_webhook_secrets,
    webhook_candidates,
)
from leasehold.records.ci.secrets import Keyring, KeyringError
from tests.conftest import sqlite_url

POLICY = ClonePolicy()
URL = "https://git.example.com/acme/widgets.git"


def keyring(*ids: str) -> Keyring:
    return Keyring({i: bytes([n + 1]) * 32 for n, i in enumerate(ids)}, ids[-1])


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return sqlite_url(tmp_path)
    return str(request.getfixturevalue("postgres_url"))


def raw_dump(factory: sessionmaker) -> str:
    """Every column of both tables as the database returns them (bytes included)."""
    with factory() as session:
        rows = [*session.execute(text("SELECT * FROM repositories")).all()]
        rows += session.execute(text("SELECT * FROM repo_webhook_secrets")).all()
    return repr(rows) + "".join(
        base64.b64encode(bytes(v)).decode() for r in rows for v in r if isinstance(v, bytes | memoryview)
    )


def test_registered_secrets_are_sealed_and_still_verify(db_url: str) -> None:
    factory = init_database(db_url)
    ring = keyring("k1")
    bind_keyring(factory, ring)
    secret = "hook-secret-plain-text-1"
    repo = add_repo(factory, "acme", "acme/widgets", URL, secret, policy=POLICY, keyring=ring)
    assert secret not in raw_dump(factory) and secret.encode().hex() not in raw_dump(factory)
    [candidate] = webhook_candidates(factory, "ACME/widgets", None)
    assert candidate.repo.id == repo.id and candidate.webhook_secret == secret


def test_plain_text_rows_of_old_databases_verify_then_get_sealed(db_url: str) -> None:
    # A row written before sealing: the secret in plain text, no sealed row beside it.
    factory = init_database(db_url)
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO repositories (id, tenant_id, name, clone_url, webhook_secret, default_branch, created_at)"
                " VALUES ('repo_old', 'acme', 'acme/old', :url, 'legacy-plain-secret', 'main', CURRENT_TIMESTAMP)"
            ),
            {"url": URL},
        )
    engine.dispose()
    ring = keyring("k1")
    # Before sealing (and with no keyring bound): the plain-text row still verifies.
    assert [c.webhook_secret for c in webhook_candidates(factory, "acme/old", None)] == ["legacy-plain-secret"]

    assert seal_webhook_secrets(factory, ring) == 1
    assert seal_webhook_secrets(factory, ring) == 0  # idempotent
    assert "legacy-plain-secret" not in raw_dump(factory)
    bind_keyring(factory, ring)
    assert [c.webhook_secret for c in webhook_candidates(factory, "acme/old", None)] == ["legacy-plain-secret"]


def test_a_sealed_secret_needs_its_keyring_and_its_own_row(db_url: str) -> None:
    factory = init_database(db_url)
    ring = keyring("k1")
    a = add_repo(factory, "acme", "acme/a", URL, "secret-of-a-123", policy=POLICY, keyring=ring)
    b = add_repo(factory, "evil", "evil/b", URL, "secret-of-b-456", policy=POLICY, keyring=ring)
    with pytest.raises(KeyringError):
        webhook_candidates(factory, "acme/a", None)  # no keyring bound to this factory
    bind_keyring(factory, ring)
    # Tenant b's row given a's ciphertext: the associated data (tenant, repository) differs.
    with factory.begin() as session:
        sealed_a = session.get(RepoWebhookSecret, a.id)
        sealed_b = session.get(RepoWebhookSecret, b.id)
        assert sealed_a is not None and sealed_b is not None
        sealed_b.key_id, sealed_b.nonce, sealed_b.ciphertext = sealed_a.key_id, sealed_a.nonce, sealed_a.ciphertext
    with pytest.raises(KeyringError, match="failed authentication"):
        webhook_candidates(factory, "evil/b", None)


def test_rotation_re_seals_webhook_secrets(db_url: str) -> None:
    factory = init_database(db_url)
    old = keyring("k1")
    add_repo(factory, "acme", "acme/r", URL, "rotate-me-123", policy=POLICY, keyring=old)
    new = Keyring({"k1": bytes([1]) * 32, "k2": bytes([2]) * 32}, "k2")
    assert rotate_webhook_secrets(factory, new) == 1
    assert rotate_webhook_secrets(factory, new) == 0
    # Only the new key is needed from now on.
    bind_keyring(factory, Keyring({"k2": bytes([2]) * 32}, "k2"))
    assert [c.webhook_secret for c in webhook_candidates(factory, "acme/r", None)] == ["rotate-me-123"]


def test_an_empty_secret_never_verifies(db_url: str) -> None:
    factory = init_database(db_url)
    with factory.begin() as session:
        session.add(Repository(id="repo_empty", tenant_id="acme", name="acme/e", clone_url=URL, webhook_secret=""))
    assert webhook_candidates(factory, "acme/e", None) == []
