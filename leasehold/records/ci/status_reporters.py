"""Where a repository's CI results are reported: its git host's REST API and credentials.

One reporter per repository (``ci_status_reporters``): the API base URL (``https://api.github.com``
or a GitHub Enterprise ``https://host/api/v3``), the repository's ``owner/name`` on that host,
and credentials sealed like CI secrets (AES-256-GCM under the secrets keyring, the associated
data binding tenant, repository and purpose, so a ciphertext moved to another row fails):

* a token (a personal access token or a fine-grained token with ``statuses: write``): commit
  statuses, one per workflow run;
* or a GitHub App (app id, installation id, private key): commit statuses and, per job, a
  check run carrying the job's annotations.

Deliveries (``ci_status_deliveries``) make reporting idempotent: one row per key (a run's
round and state, or a job's round), written when the git host accepted it, with the remote id
(a check run's id, so a later change of the same check run is a ``PATCH``, never a second run).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import DateTime, Integer, String, Text, UniqueConstraint, select
from sqlalchemy.orm import Mapped, mapped_column, sessionmaker

from leasehold.records.base import Base, FieldError, from_row, utcnow
from leasehold.records.ci.secrets import Keyring, Sealed

_AAD_VERSION = b"leasehold-ci-status-reporter-v1"
# GitHub's own limits: owner 39 characters, repository name 100.
_MAX_REPOSITORY = 140
MAX_PRIVATE_KEY_BYTES = 16 * 1024
MAX_TOKEN_BYTES = 1024


class CIStatusReporter(Sealed, Base):
    """A repository's git host and its sealed credentials."""

    __tablename__ = "ci_status_reporters"
    __table_args__ = (UniqueConstraint("tenant_id", "repo_id", name="uq_ci_status_reporters_repo"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(String(64), index=True)
    repo_id: Mapped[str] = mapped_column(String(64))
    api_url: Mapped[str] = mapped_column(String(512))
    repository: Mapped[str] = mapped_column(String(_MAX_REPOSITORY))
    # "token" or "app"; what the sealed credentials hold.
    kind: Mapped[str] = mapped_column(String(16))
    app_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    installation_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class CIStatusDelivery(Base):
    """One report the git host accepted (or refused for good), by its idempotency key."""

    __tablename__ = "ci_status_deliveries"

    key: Mapped[str] = mapped_column(String(400), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64), index=True)
    run_id: Mapped[str] = mapped_column(String(128), index=True)
    # "delivered" or "refused" (the git host answered 401/403/404/422: retrying cannot help).
    outcome: Mapped[str] = mapped_column(String(16))
    remote_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ReporterError(FieldError):
    """A reporter setting the caller can fix; ``field`` names it."""


@dataclass(frozen=True)
class ReporterInfo:
    """What anyone may see of a reporter: never its token or key."""

    repo_id: str
    api_url: str
    repository: str
    kind: str
    app_id: str | None
    installation_id: str | None
    updated_at: datetime


@dataclass(frozen=True)
class Reporter:
    """A reporter with its credentials opened (the reporting activity's view)."""

    info: ReporterInfo
    token: str | None
    private_key: str | None


@dataclass(frozen=True)
class ReporterSetting:
    """What a caller sets: a token, or an app (``app_id``, ``installation_id``, ``private_key``)."""

    api_url: str
    repository: str
    token: str | None = None
    app_id: str | None = None
    installation_id: str | None = None
    private_key: str | None = None


def _aad(tenant_id: str, repo_id: str) -> bytes:
    return b"\x00".join([_AAD_VERSION, tenant_id.encode(), repo_id.encode()])


def _check(setting: ReporterSetting) -> tuple[str, str]:
    """(kind, the credentials as JSON to seal), or ReporterError naming the field."""
    owner, sep, name = setting.repository.partition("/")
    if not sep or not owner or not name or "/" in name or len(setting.repository) > _MAX_REPOSITORY:
        raise ReporterError("repository", "must be 'owner/name' as the git host spells it")
    app = [setting.app_id, setting.installation_id, setting.private_key]
    if setting.token is not None:
        if any(v is not None for v in app):
            raise ReporterError(
                "token", "give a token or a GitHub App (app_id, installation_id, private_key), not both"
            )
        if not setting.token.strip() or len(setting.token.encode()) > MAX_TOKEN_BYTES:
            raise ReporterError("token", f"must be a non-empty token of at most {MAX_TOKEN_BYTES} bytes")
        return "token", json.dumps({"token": setting.token})
    for field, value in (("app_id", setting.app_id), ("installation_id", setting.installation_id)):
        if value is None or not value.isdigit() or len(value) > 20:
            raise ReporterError(field, "must be the GitHub App's numeric id (or give a token instead)")
    key = setting.private_key or ""
    if "PRIVATE KEY-----" not in key or len(key.encode()) > MAX_PRIVATE_KEY_BYTES:
        raise ReporterError("private_key", "must be the GitHub App's PEM private key")
    return "app", json.dumps({"private_key": key})


def _info(row: CIStatusReporter) -> ReporterInfo:
    return from_row(ReporterInfo, row)


def put_reporter(
    factory: sessionmaker, keyring: Keyring, tenant_id: str, repo_id: str, setting: ReporterSetting
) -> ReporterInfo:
    """Create or replace the repository's reporter (the URL is checked by the caller)."""
    kind, sealed = _check(setting)
    key_id, nonce, ciphertext = keyring.seal(_aad(tenant_id, repo_id), sealed)
    now = utcnow()
    with factory.begin() as session:
        row = session.scalar(
            select(CIStatusReporter).where(CIStatusReporter.tenant_id == tenant_id, CIStatusReporter.repo_id == repo_id)
        )
        if row is None:
            row = CIStatusReporter(tenant_id=tenant_id, repo_id=repo_id, created_at=now)
            session.add(row)
        row.api_url, row.repository, row.kind = setting.api_url.rstrip("/"), setting.repository, kind
        row.app_id, row.installation_id = setting.app_id, setting.installation_id
        row.key_id, row.nonce, row.ciphertext, row.updated_at = key_id, nonce, ciphertext, now
        session.flush()
        return _info(row)


def _row(session: object, tenant_id: str, repo_id: str) -> CIStatusReporter | None:
    return session.scalar(  # type: ignore[attr-defined,no-any-return]
        select(CIStatusReporter).where(CIStatusReporter.tenant_id == tenant_id, CIStatusReporter.repo_id == repo_id)
    )


def get_reporter(factory: sessionmaker, tenant_id: str, repo_id: str) -> ReporterInfo | None:
    with factory() as session:
        row = _row(session, tenant_id, repo_id)
        return None if row is None else _info(row)


def has_reporter(factory: sessionmaker, tenant_id: str, repo_id: str) -> bool:
    with factory() as session:
        return _row(session, tenant_id, repo_id) is not None


def delete_reporter(factory: sessionmaker, tenant_id: str, repo_id: str) -> bool:
    with factory.begin() as session:
        row = _row(session, tenant_id, repo_id)
        if row is None:
            return False
        session.delete(row)
        return True


def open_reporter(factory: sessionmaker, keyring: Keyring, tenant_id: str, repo_id: str) -> Reporter | None:
    """The reporter with its credentials (KeyringError if they cannot be opened)."""
    with factory() as session:
        row = _row(session, tenant_id, repo_id)
        if row is None:
            return None
        info = _info(row)
        sealed = json.loads(keyring.open(row.key_id, row.nonce, row.ciphertext, _aad(tenant_id, repo_id)))
    return Reporter(info=info, token=sealed.get("token"), private_key=sealed.get("private_key"))


def delivery(factory: sessionmaker, key: str) -> CIStatusDelivery | None:
    with factory() as session:
        row = session.get(CIStatusDelivery, key)
        if row is not None:
            session.expunge(row)
        return row


def record_delivery(
    factory: sessionmaker,
    key: str,
    tenant_id: str,
    run_id: str,
    outcome: str,
    remote_id: str | None = None,
    detail: str | None = None,
) -> None:
    """Write (or overwrite) the delivery of ``key``."""
    with factory.begin() as session:
        row = session.get(CIStatusDelivery, key)
        if row is None:
            row = CIStatusDelivery(key=key, tenant_id=tenant_id, run_id=run_id)
            session.add(row)
        row.outcome, row.remote_id, row.detail, row.updated_at = outcome, remote_id, detail, utcnow()
