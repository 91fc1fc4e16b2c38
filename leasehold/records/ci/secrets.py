"""CI secrets: per tenant (optionally per repository), write-only, encrypted at rest.

Each value is sealed with AES-256-GCM (``cryptography``); the associated data binds the tenant,
the repository scope and the name, so a ciphertext copied onto another row (another tenant,
another repository, another name) fails authentication instead of decrypting. Every row keeps
the id of the key that sealed it, so keys can rotate: the active key seals, every configured
key opens, and ``rotate_secrets`` re-seals old rows under the active key.

Keys come from settings (``LEASEHOLD_SECRETS_KEYS="k1:<base64 32 bytes>,k2:..."`` and
``LEASEHOLD_SECRETS_ACTIVE_KEY``); the embedded default generates one into the data dir.

Values never travel through Temporal: workflows carry secret *names*; the CI job activity
reads the values it needs from here when it starts.
"""

from __future__ import annotations

import base64
import os
import re
import secrets as _random
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import DateTime, LargeBinary, String, UniqueConstraint, select
from sqlalchemy.orm import Mapped, mapped_column, sessionmaker

from leasehold.data_dir import read_or_create_secret
from leasehold.records.base import Base, FieldError, from_row, utcnow
from leasehold.records.ci.scoped import TENANT_SCOPE, delete_scoped, existing_or_room, list_scoped, seen_by_repository
from leasehold.settings import Settings

# A value shorter than this is refused: masking "abc" in logs would reveal more than it hides.
MIN_SECRET_LENGTH = 8
# GitHub's limit for one secret.
MAX_SECRET_BYTES = 48 * 1024
MAX_SECRETS_PER_SCOPE = 200
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_KEY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")
KEY_FILE = "secrets-keys"
_AAD_VERSION = b"leasehold-ci-secret-v1"


class Sealed:
    """A value sealed by ``Keyring.seal``, as a table's columns (a mixin): the key's id, the
    nonce and the ciphertext."""

    key_id: Mapped[str] = mapped_column(String(32))
    nonce: Mapped[bytes] = mapped_column(LargeBinary(12))
    ciphertext: Mapped[bytes] = mapped_column(LargeBinary)


class CISecret(Sealed, Base):
    """One sealed secret value."""

    __tablename__ = "ci_secrets"
    __table_args__ = (UniqueConstraint("tenant_id", "repo_scope", "name", name="uq_ci_secrets_scope_name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64), index=True)
    # "" for tenant-wide, else the repository id.
    repo_scope: Mapped[str] = mapped_column(String(64), default=TENANT_SCOPE)
    name: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class SecretError(FieldError):
    """A secret the caller can fix; ``field`` names the offending input."""


class KeyringError(RuntimeError):
    """The configured keys are unusable, or a row's key is not configured."""


@dataclass(frozen=True)
class SecretInfo:
    """What anyone may see of a secret: never its value."""

    name: str
    repo_id: str | None
    key_id: str
    created_at: datetime
    updated_at: datetime


def normalize_name(name: str) -> str:
    """Names are case-insensitive (as on GitHub) and stored upper-case."""
    if not _NAME.match(name):
        raise SecretError("name", "a secret name holds letters, digits and '_' and does not start with a digit")
    upper = name.upper()
    if upper.startswith("GITHUB_"):
        raise SecretError("name", "secret names must not start with GITHUB_")
    return upper


def validate_value(value: str) -> str:
    if len(value) < MIN_SECRET_LENGTH:
        raise SecretError(
            "value",
            f"a secret must be at least {MIN_SECRET_LENGTH} characters: a shorter one would be revealed, "
            "not hidden, by masking it in logs",
        )
    if len(value.encode()) > MAX_SECRET_BYTES:
        raise SecretError("value", f"a secret must be at most {MAX_SECRET_BYTES} bytes")
    if not value.strip():
        raise SecretError("value", "a secret must not be only whitespace")
    return value


def _aad(tenant_id: str, repo_scope: str, name: str) -> bytes:
    return b"\x00".join([_AAD_VERSION, tenant_id.encode(), repo_scope.encode(), name.encode()])


class Keyring:
    """The keys secrets are sealed with: one active (for writing), all usable for reading."""

    def __init__(self, keys: dict[str, bytes], active: str) -> None:
        if active not in keys:
            raise KeyringError(f"the active secrets key {active!r} is not among the configured keys")
        for key_id, key in keys.items():
            if not _KEY_ID.match(key_id):
                raise KeyringError(f"invalid secrets key id {key_id!r}")
            if len(key) != 32:
                raise KeyringError(f"secrets key {key_id!r} must be 32 bytes (AES-256), got {len(key)}")
        self._keys = {k: AESGCM(v) for k, v in keys.items()}
        self.active = active

    @staticmethod
    def parse(text: str) -> dict[str, bytes]:
        """``"id:base64,id:base64"`` (commas or newlines) -> ``{id: key}``."""
        keys: dict[str, bytes] = {}
        for part in re.split(r"[,\s]+", text.strip()):
            if not part:
                continue
            key_id, sep, b64 = part.partition(":")
            if not sep:
                raise KeyringError("secrets keys are 'id:base64' pairs")
            try:
                keys[key_id] = base64.b64decode(b64, validate=True)
            except ValueError:
                raise KeyringError(f"secrets key {key_id!r} is not valid base64") from None
        if not keys:
            raise KeyringError("no secrets keys configured")
        return keys

    @classmethod
    def from_settings(cls, settings: Settings) -> Keyring:
        """Configured keys (the setting, else its file), or a key generated once into the data
        dir (embedded default)."""
        text = settings.secrets_keys.get_secret_value().strip() if settings.secrets_keys is not None else ""
        if not text and settings.secrets_keys_file is not None:
            # An empty or unreadable file refuses: it never falls back to a key of this process.
            try:
                text = settings.secrets_keys_file.read_text()
            except OSError as exc:
                raise KeyringError(
                    f"LEASEHOLD_SECRETS_KEYS_FILE {settings.secrets_keys_file} cannot be read ({exc.strerror}):"
                    " create it (leasehold secrets init-keys FILE) or set LEASEHOLD_SECRETS_KEYS"
                ) from None
        elif not text:
            text = read_or_create_secret(settings.data_dir / KEY_FILE, new_keyring_text)
        keys = cls.parse(text)
        return cls(keys, settings.secrets_active_key or list(keys)[-1])

    def seal(self, aad: bytes, value: str) -> tuple[str, bytes, bytes]:
        nonce = os.urandom(12)
        return self.active, nonce, self._keys[self.active].encrypt(nonce, value.encode(), aad)

    def open(self, key_id: str, nonce: bytes, ciphertext: bytes, aad: bytes) -> str:
        aead = self._keys.get(key_id)
        if aead is None:
            raise KeyringError(f"secrets key {key_id!r} is not configured (needed to read a stored secret)")
        try:
            return aead.decrypt(nonce, ciphertext, aad).decode()
        except InvalidTag:
            raise KeyringError("a stored secret failed authentication (tampered, moved or wrong key)") from None


def new_keyring_text() -> str:
    """A keyring of one fresh key, as a keys file holds it."""
    return f"k1:{base64.b64encode(os.urandom(32)).decode()}\n"


def init_keys_file(path: Path) -> bool:
    """Write a new one-key keyring to ``path`` unless it exists (never replaced: the values
    sealed under it would become unreadable); True when written. Readable by its owner only."""
    line = new_keyring_text()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as out:
        out.write(line)
    return True


def _info(row: CISecret) -> SecretInfo:
    return from_row(SecretInfo, row, repo_id=row.repo_scope or None)


def put_secret(
    factory: sessionmaker, keyring: Keyring, tenant_id: str, repo_id: str | None, name: str, value: str
) -> tuple[SecretInfo, bool]:
    """Create or replace a secret; returns its info and whether it was new."""
    name = normalize_name(name)
    validate_value(value)
    scope = repo_id or TENANT_SCOPE
    key_id, nonce, ciphertext = keyring.seal(_aad(tenant_id, scope, name), value)
    now = utcnow()
    with factory.begin() as session:
        full = SecretError("name", f"at most {MAX_SECRETS_PER_SCOPE} secrets per tenant or repository")
        row = existing_or_room(session, CISecret, tenant_id, scope, name, MAX_SECRETS_PER_SCOPE, full)
        created = row is None
        if row is None:
            row = CISecret(
                id=f"sec_{_random.token_hex(8)}",
                tenant_id=tenant_id,
                repo_scope=scope,
                name=name,
                created_at=now,
            )
            session.add(row)
        row.key_id, row.nonce, row.ciphertext, row.updated_at = key_id, nonce, ciphertext, now
        info = _info(row)
    return info, created


def list_secrets(factory: sessionmaker, tenant_id: str, repo_id: str | None = None) -> list[SecretInfo]:
    """Names and times of one scope's secrets (tenant-wide when ``repo_id`` is None)."""
    return [_info(r) for r in list_scoped(factory, CISecret, tenant_id, repo_id)]


def delete_secret(factory: sessionmaker, tenant_id: str, repo_id: str | None, name: str) -> bool:
    """Remove a secret; False when there was none."""
    return delete_scoped(factory, CISecret, tenant_id, repo_id, normalize_name(name))


def fetch_secrets(
    factory: sessionmaker, keyring: Keyring, tenant_id: str, repo_id: str, names: Iterable[str]
) -> dict[str, str]:
    """Values of exactly ``names`` for one tenant's repository: a repository secret wins over a
    tenant-wide one of the same name; names with no secret are absent from the answer."""
    wanted = set()
    for name in names:
        try:
            wanted.add(normalize_name(name))
        except SecretError:
            continue
    if not wanted:
        return {}
    return {
        row.name: keyring.open(row.key_id, row.nonce, row.ciphertext, _aad(row.tenant_id, row.repo_scope, row.name))
        for row in seen_by_repository(factory, CISecret, tenant_id, repo_id, wanted)
    }


def rotate_secrets(factory: sessionmaker, keyring: Keyring) -> int:
    """Re-seal every row not under the active key; returns how many changed."""
    changed = 0
    with factory.begin() as session:
        rows = session.scalars(select(CISecret).where(CISecret.key_id != keyring.active)).all()
        for row in rows:
            aad = _aad(row.tenant_id, row.repo_scope, row.name)
            value = keyring.open(row.key_id, row.nonce, row.ciphertext, aad)
            row.key_id, row.nonce, row.ciphertext = keyring.seal(aad, value)
            changed += 1
    return changed
