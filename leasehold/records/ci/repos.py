"""Registered repositories: which tenant owns a repository, where to clone it, its webhook secret.

The clone URL must pass the operator's ``ClonePolicy`` (``leasehold.clone_urls``) at
registration; the worker checks it again before every clone or fetch.

The webhook secret is kept so that a delivery's HMAC can be verified; it is never returned by
the API or printed by the CLI. It is sealed at rest like CI secrets (AES-256-GCM with the same
``Keyring``; the associated data binds tenant and repository) in ``repo_webhook_secrets``.
Databases made before that kept it in plain text in ``repositories.webhook_secret``: such a row
still verifies webhooks, and ``seal_webhook_secrets`` (run when the API starts) seals it and
blanks the column.
"""

from __future__ import annotations

import logging
import re
import secrets
import weakref
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import BigInteger, DateTime, ForeignKey, String, UniqueConstraint, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column, sessionmaker

from leasehold.clone_urls import ClonePolicy, CloneUrlRefused, parse
from leasehold.records.base import Base, FieldError, from_row, utcnow
from leasehold.records.ci.secrets import Keyring, KeyringError, Sealed

log = logging.getLogger(__name__)

# GitHub-style "owner/name" (also "group/subgroup/name" for other hosts).
_FULL_NAME = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+$")
_BRANCH = re.compile(r"^[A-Za-z0-9_./-]{1,200}$")
MAX_SECRET_LENGTH = 256
_AAD_VERSION = b"leasehold-webhook-secret-v1"
# The keyring each session factory's webhook secrets are opened with (``bind_keyring``).
_KEYRINGS: weakref.WeakKeyDictionary[sessionmaker, Keyring] = weakref.WeakKeyDictionary()


class Repository(Base):
    """One repository registered by one tenant; (tenant, name) is unique."""

    __tablename__ = "repositories"
    __table_args__ = (UniqueConstraint("tenant_id", "name", name="uq_repositories_tenant_name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64), index=True)
    # Full name as the git host spells it ("owner/repo"); webhooks are matched on it.
    name: Mapped[str] = mapped_column(String(200), index=True)
    clone_url: Mapped[str] = mapped_column(String(2000))
    # Plain text only in rows written before secrets were sealed; "" once sealed.
    webhook_secret: Mapped[str] = mapped_column(String(MAX_SECRET_LENGTH))
    default_branch: Mapped[str] = mapped_column(String(200), default="main")
    # The git host's numeric repository id, when known: a webhook may be matched on it.
    github_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True, index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class RepoWebhookSecret(Sealed, Base):
    """A repository's sealed webhook secret (a table of its own: the plain-text column is too
    short for a sealed value, and ``create_all`` adds tables to old databases, not columns)."""

    __tablename__ = "repo_webhook_secrets"

    repo_id: Mapped[str] = mapped_column(String(32), ForeignKey("repositories.id"), primary_key=True)


@dataclass(frozen=True)
class RepoRecord:
    """A repository as the rest of leasehold sees it (no secret)."""

    id: str
    tenant_id: str
    name: str
    clone_url: str
    default_branch: str
    github_id: int | None
    created_at: datetime


@dataclass(frozen=True)
class WebhookCandidate:
    """A repository a webhook may be for, with the secret that must verify it."""

    repo: RepoRecord
    webhook_secret: str


class RepoError(FieldError):
    """A registration the caller can fix; ``field`` names the offending input."""


class RepoExists(RepoError):
    """The tenant already registered a repository with this name."""


def _record(row: Repository) -> RepoRecord:
    return from_row(RepoRecord, row)


def validate_clone_url(value: str, policy: ClonePolicy) -> str:
    """The clone URL to store, if ``policy`` allows it; raises ``RepoError`` naming ``clone_url``.

    ``ssh://``, ``git://`` and scp-like ``host:path`` forms are always refused: the worker
    clones without credentials or host keys. The reason never says whether a path exists.
    """
    value = value.strip()
    try:
        parse(value, policy)
    except CloneUrlRefused as exc:
        raise RepoError("clone_url", exc.reason) from None
    return str(Path(value)) if value.startswith("/") else value


def validate_registration(
    name: str, clone_url: str, webhook_secret: str, default_branch: str, policy: ClonePolicy
) -> tuple[str, str]:
    """Check every field; returns the normalised (name, clone_url)."""
    name = name.strip()
    if not _FULL_NAME.match(name) or len(name) > 200:
        raise RepoError("name", f"name must be a full name like 'owner/repo' (got {name!r})")
    url = validate_clone_url(clone_url, policy)
    if len(webhook_secret) < 8 or len(webhook_secret) > MAX_SECRET_LENGTH:
        raise RepoError("webhook_secret", f"webhook_secret must be 8 to {MAX_SECRET_LENGTH} characters")
    if not _BRANCH.match(default_branch) or ".." in default_branch or default_branch.startswith(("/", "-")):
        raise RepoError("default_branch", f"default_branch is not a valid branch name (got {default_branch!r})")
    return name, url


def _aad(tenant_id: str, repo_id: str) -> bytes:
    return b"\x00".join([_AAD_VERSION, tenant_id.encode(), repo_id.encode()])


def _sealed(keyring: Keyring, tenant_id: str, repo_id: str, secret: str) -> RepoWebhookSecret:
    key_id, nonce, ciphertext = keyring.seal(_aad(tenant_id, repo_id), secret)
    return RepoWebhookSecret(repo_id=repo_id, key_id=key_id, nonce=nonce, ciphertext=ciphertext)


def bind_keyring(factory: sessionmaker, keyring: Keyring) -> None:
    """Make ``webhook_candidates(factory, ...)`` open sealed secrets with ``keyring`` (its
    signature takes no keyring: the webhook handler holds only the session factory)."""
    _KEYRINGS[factory] = keyring


def add_repo(
    factory: sessionmaker,
    tenant_id: str,
    name: str,
    clone_url: str,
    webhook_secret: str,
    default_branch: str = "main",
    github_id: int | None = None,
    *,
    policy: ClonePolicy,
    keyring: Keyring,
) -> RepoRecord:
    """Register a repository for ``tenant_id``, its webhook secret sealed with ``keyring``;
    raises ``RepoError`` / ``RepoExists``."""
    name, clone_url = validate_registration(name, clone_url, webhook_secret, default_branch, policy)
    row = Repository(
        id=f"repo_{secrets.token_hex(8)}",
        tenant_id=tenant_id,
        name=name,
        clone_url=clone_url,
        webhook_secret="",
        default_branch=default_branch,
        github_id=github_id,
        created_at=utcnow(),
    )
    try:
        with factory.begin() as session:
            session.add(row)
            session.flush()  # the repository row first: the secret's row refers to it
            session.add(_sealed(keyring, tenant_id, row.id, webhook_secret))
    except IntegrityError:
        raise RepoExists("name", f"repository {name!r} is already registered") from None
    return _record(row)


def seal_webhook_secrets(factory: sessionmaker, keyring: Keyring) -> int:
    """Seal every webhook secret still stored in plain text (rows older than sealing) and
    blank its column; returns how many. Idempotent, and safe while another process does it."""
    with factory() as session:
        ids = session.scalars(select(Repository.id).where(Repository.webhook_secret != "")).all()
    sealed = 0
    for repo_id in ids:
        try:
            with factory.begin() as session:
                row = session.get(Repository, repo_id)
                if row is None or not row.webhook_secret or session.get(RepoWebhookSecret, repo_id) is not None:
                    continue
                session.add(_sealed(keyring, row.tenant_id, row.id, row.webhook_secret))
                row.webhook_secret = ""
            sealed += 1
        except IntegrityError:
            continue  # another process sealed it first
    if sealed:
        log.info("sealed %d webhook secret(s) stored in plain text", sealed)
    return sealed


def rotate_webhook_secrets(factory: sessionmaker, keyring: Keyring) -> int:
    """Re-seal every webhook secret not under the active key; returns how many changed."""
    changed = 0
    with factory.begin() as session:
        pairs = session.execute(
            select(RepoWebhookSecret, Repository.tenant_id)
            .join(Repository, Repository.id == RepoWebhookSecret.repo_id)
            .where(RepoWebhookSecret.key_id != keyring.active)
        ).all()
        for secret_row, tenant_id in pairs:
            aad = _aad(tenant_id, secret_row.repo_id)
            value = keyring.open(secret_row.key_id, secret_row.nonce, secret_row.ciphertext, aad)
            secret_row.key_id, secret_row.nonce, secret_row.ciphertext = keyring.seal(aad, value)
            changed += 1
    return changed


def get_repo(factory: sessionmaker, tenant_id: str, repo_id: str) -> RepoRecord | None:
    """The tenant's repository ``repo_id``; ``None`` when missing or another tenant's."""
    with factory() as session:
        row = session.scalar(select(Repository).where(Repository.id == repo_id, Repository.tenant_id == tenant_id))
    return _record(row) if row is not None else None


def list_repos(factory: sessionmaker, tenant_id: str) -> list[RepoRecord]:
    """The tenant's repositories, oldest first."""
    with factory() as session:
        rows = session.scalars(
            select(Repository).where(Repository.tenant_id == tenant_id).order_by(Repository.created_at, Repository.id)
        ).all()
    return [_record(r) for r in rows]


def all_repos(factory: sessionmaker, repo_ids: list[str] | None = None) -> list[RepoRecord]:
    """Every tenant's repositories (or those of ``repo_ids``), oldest first: for the reconciler."""
    query = select(Repository).order_by(Repository.created_at, Repository.id)
    if repo_ids is not None:
        query = query.where(Repository.id.in_(repo_ids))
    with factory() as session:
        rows = session.scalars(query).all()
    return [_record(r) for r in rows]


def webhook_candidates(
    factory: sessionmaker, full_name: str | None, host_id: int | str | None
) -> list[WebhookCandidate]:
    """Repositories a webhook may be for: by full name (case-insensitive, as hosts treat it),
    by the host's numeric id, or by our own id. The caller keeps those whose secret verifies,
    so a name registered by several tenants still reaches only the ones holding the secret."""
    conditions = []
    if full_name:
        conditions.append(func.lower(Repository.name) == full_name.lower())
    if host_id is not None:
        conditions.append(Repository.id == str(host_id))
        if isinstance(host_id, int) or (isinstance(host_id, str) and host_id.isdigit()):
            conditions.append(Repository.github_id == int(host_id))
    if not conditions:
        return []
    with factory() as session:
        rows = session.execute(
            select(Repository, RepoWebhookSecret)
            .outerjoin(RepoWebhookSecret, RepoWebhookSecret.repo_id == Repository.id)
            .where(or_(*conditions))
            .order_by(Repository.id)
        ).all()
    candidates = []
    for repo, sealed in rows:
        if sealed is None:
            if not repo.webhook_secret:
                continue  # never verify against an empty key
            # Written before sealing and not yet sealed (the API seals such rows when it starts).
            candidates.append(WebhookCandidate(repo=_record(repo), webhook_secret=repo.webhook_secret))
            continue
        keyring = _KEYRINGS.get(factory)
        if keyring is None:
            raise KeyringError("no keyring is bound to this database (leasehold.records.ci.repos.bind_keyring)")
        secret = keyring.open(sealed.key_id, sealed.nonce, sealed.ciphertext, _aad(repo.tenant_id, repo.id))
        candidates.append(WebhookCandidate(repo=_record(repo), webhook_secret=secret))
    return candidates
