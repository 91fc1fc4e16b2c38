"""The secrets store: sealed at rest, bound to tenant/repository/name, rotatable, write-only."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import sessionmaker

from leasehold.database import init_database
from leasehold.records.ci.secrets import (
    MIN_SECRET_LENGTH,
    CISecret,
    Keyring,
    KeyringError,
    SecretError,
    delete_secret,
    fetch_secrets,
    list_secrets,
    put_secret,
    rotate_secrets,
)
from leasehold.settings import Settings

VALUE = "correct-horse-battery-staple"


def key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


@pytest.fixture
def db(tmp_path: Path) -> sessionmaker:
    return init_database(f"sqlite:///{tmp_path / 'db.sqlite'}")


@pytest.fixture
def keyring() -> Keyring:
    return Keyring(Keyring.parse(f"k1:{key()}"), "k1")


def test_sealed_at_rest_and_listed_without_values(db: sessionmaker, keyring: Keyring, tmp_path: Path) -> None:
    info, created = put_secret(db, keyring, "acme", None, "deploy_token", VALUE)
    assert created and info.name == "DEPLOY_TOKEN" and info.key_id == "k1"
    _, created_again = put_secret(db, keyring, "acme", None, "DEPLOY_TOKEN", VALUE + "-2")
    assert not created_again
    assert VALUE.encode() not in (tmp_path / "db.sqlite").read_bytes()
    listed = list_secrets(db, "acme")
    assert [i.name for i in listed] == ["DEPLOY_TOKEN"] and VALUE not in repr(listed)
    assert list_secrets(db, "other") == []
    assert fetch_secrets(db, keyring, "acme", "repo_x", ["deploy_token", "MISSING"]) == {"DEPLOY_TOKEN": VALUE + "-2"}
    assert fetch_secrets(db, keyring, "other", "repo_x", ["DEPLOY_TOKEN"]) == {}


def test_repository_scope_wins_and_stays_in_its_repository(db: sessionmaker, keyring: Keyring) -> None:
    put_secret(db, keyring, "acme", None, "TOKEN", "tenant-wide-value")
    put_secret(db, keyring, "acme", "repo_a", "TOKEN", "repo-a-value")
    assert fetch_secrets(db, keyring, "acme", "repo_a", ["TOKEN"]) == {"TOKEN": "repo-a-value"}
    assert fetch_secrets(db, keyring, "acme", "repo_b", ["TOKEN"]) == {"TOKEN": "tenant-wide-value"}
    assert delete_secret(db, "acme", "repo_a", "token") and not delete_secret(db, "acme", "repo_a", "token")
    assert fetch_secrets(db, keyring, "acme", "repo_a", ["TOKEN"]) == {"TOKEN": "tenant-wide-value"}


@pytest.mark.parametrize(
    ("name", "value", "field"),
    [
        ("TOKEN", "x" * (MIN_SECRET_LENGTH - 1), "value"),
        ("TOKEN", " " * 20, "value"),
        ("1TOKEN", VALUE, "name"),
        ("has-dash", VALUE, "name"),
        ("GITHUB_TOKEN", VALUE, "name"),
    ],
)
def test_refusals(db: sessionmaker, keyring: Keyring, name: str, value: str, field: str) -> None:
    with pytest.raises(SecretError) as err:
        put_secret(db, keyring, "acme", None, name, value)
    assert err.value.field == field


def test_a_ciphertext_moved_to_another_tenant_does_not_open(db: sessionmaker, keyring: Keyring) -> None:
    put_secret(db, keyring, "victim", None, "TOKEN", VALUE)
    put_secret(db, keyring, "attacker", None, "TOKEN", "attacker-own-value")
    with db.begin() as session:
        stolen = session.scalar(select(CISecret).where(CISecret.tenant_id == "victim"))
        assert stolen is not None
        session.execute(
            update(CISecret)
            .where(CISecret.tenant_id == "attacker")
            .values(nonce=stolen.nonce, ciphertext=stolen.ciphertext)
        )
    with pytest.raises(KeyringError):
        fetch_secrets(db, keyring, "attacker", "repo", ["TOKEN"])
    assert fetch_secrets(db, keyring, "victim", "repo", ["TOKEN"]) == {"TOKEN": VALUE}


def test_rotation(db: sessionmaker) -> None:
    old = f"k1:{key()}"
    first = Keyring(Keyring.parse(old), "k1")
    put_secret(db, first, "acme", None, "TOKEN", VALUE)
    both = Keyring(Keyring.parse(f"{old},k2:{key()}"), "k2")
    assert fetch_secrets(db, both, "acme", "r", ["TOKEN"]) == {"TOKEN": VALUE}
    assert rotate_secrets(db, both) == 1 and rotate_secrets(db, both) == 0
    assert list_secrets(db, "acme")[0].key_id == "k2"
    with pytest.raises(KeyringError):
        fetch_secrets(db, first, "acme", "r", ["TOKEN"])  # k2 is not configured there


def test_keyring_from_settings(tmp_path: Path) -> None:
    generated = Keyring.from_settings(Settings(data_dir=tmp_path))
    assert (tmp_path / "secrets-keys").stat().st_mode & 0o077 == 0
    assert Keyring.from_settings(Settings(data_dir=tmp_path)).active == generated.active
    configured = Settings(data_dir=tmp_path, secrets_keys=f"a:{key()},b:{key()}", secrets_active_key="a")
    assert Keyring.from_settings(configured).active == "a"
    with pytest.raises(KeyringError):
        Keyring.from_settings(Settings(data_dir=tmp_path, secrets_keys="a:bm90LTMyLWJ5dGVz"))
