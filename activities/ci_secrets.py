"""Where the CI job activity gets the values of the secrets a job references.

The worker reads them from the database when an attempt starts (it has the settings and the
keys); workflows and their histories only ever carry secret *names*.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from sqlalchemy.orm import sessionmaker

from leasehold.secrets import Keyring, fetch_secrets


class SecretSource(Protocol):
    """Values of exactly the named secrets of one tenant's repository."""

    def fetch(self, tenant_id: str, repo_id: str, names: Iterable[str]) -> dict[str, str]:
        """``{NAME: value}`` for the names that have a secret (others are absent)."""


class DatabaseSecretSource:
    """Secrets sealed in the leasehold database (``leasehold.secrets``)."""

    def __init__(self, factory: sessionmaker, keyring: Keyring) -> None:
        self._factory = factory
        self._keyring = keyring

    def fetch(self, tenant_id: str, repo_id: str, names: Iterable[str]) -> dict[str, str]:
        return fetch_secrets(self._factory, self._keyring, tenant_id, repo_id, names)


class NoSecrets:
    """A source without secrets (tests of the engine that need none)."""

    def fetch(self, tenant_id: str, repo_id: str, names: Iterable[str]) -> dict[str, str]:
        return {}
