"""Registered repositories: which tenant owns a repository, where to clone it, its webhook secret.

The webhook secret is kept so that a delivery's HMAC can be verified; it is never returned by
the API or printed by the CLI. (Encryption at rest arrives with CI secrets in a later issue;
until then the database file is the trust boundary.)
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

from sqlalchemy import BigInteger, DateTime, String, UniqueConstraint, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column, sessionmaker

from leasehold.database import Base, utcnow

# GitHub-style "owner/name" (also "group/subgroup/name" for other hosts).
_FULL_NAME = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+$")
_BRANCH = re.compile(r"^[A-Za-z0-9_./-]{1,200}$")
MAX_SECRET_LENGTH = 256


class Repository(Base):
    """One repository registered by one tenant; (tenant, name) is unique."""

    __tablename__ = "repositories"
    __table_args__ = (UniqueConstraint("tenant_id", "name", name="uq_repositories_tenant_name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64), index=True)
    # Full name as the git host spells it ("owner/repo"); webhooks are matched on it.
    name: Mapped[str] = mapped_column(String(200), index=True)
    clone_url: Mapped[str] = mapped_column(String(2000))
    webhook_secret: Mapped[str] = mapped_column(String(MAX_SECRET_LENGTH))
    default_branch: Mapped[str] = mapped_column(String(200), default="main")
    # The git host's numeric repository id, when known: a webhook may be matched on it.
    github_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True, index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


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


class RepoError(ValueError):
    """A registration the caller can fix; ``field`` names the offending input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class RepoExists(RepoError):
    """The tenant already registered a repository with this name."""


def _record(row: Repository) -> RepoRecord:
    return RepoRecord(
        id=row.id,
        tenant_id=row.tenant_id,
        name=row.name,
        clone_url=row.clone_url,
        default_branch=row.default_branch,
        github_id=row.github_id,
        created_at=row.created_at,
    )


def validate_clone_url(value: str) -> str:
    """A local absolute path, a ``file://`` URL or an ``https://`` URL; anything else is refused.

    ``ssh://``, ``git://``, ``http://`` and scp-like ``host:path`` forms are refused: the
    worker clones without credentials or host keys, and plain http would be tamperable.
    """
    value = value.strip()
    if not value:
        raise RepoError("clone_url", "clone_url must not be empty")
    if "\x00" in value or "\n" in value:
        raise RepoError("clone_url", "clone_url contains control characters")
    if value.startswith("/"):
        return str(Path(value))
    parts = urlsplit(value)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise RepoError("clone_url", "a file:// clone_url must name an absolute local path")
        return value
    if parts.scheme == "https":
        if not parts.hostname or not parts.path.strip("/"):
            raise RepoError("clone_url", "an https:// clone_url needs a host and a repository path")
        if parts.username or parts.password:
            raise RepoError("clone_url", "clone_url must not embed credentials")
        return value
    raise RepoError(
        "clone_url",
        f"clone_url must be an absolute local path, a file:// URL or an https:// URL (got {value!r})",
    )


def validate_registration(name: str, clone_url: str, webhook_secret: str, default_branch: str) -> tuple[str, str]:
    """Check every field; returns the normalised (name, clone_url)."""
    name = name.strip()
    if not _FULL_NAME.match(name) or len(name) > 200:
        raise RepoError("name", f"name must be a full name like 'owner/repo' (got {name!r})")
    url = validate_clone_url(clone_url)
    if len(webhook_secret) < 8 or len(webhook_secret) > MAX_SECRET_LENGTH:
        raise RepoError("webhook_secret", f"webhook_secret must be 8 to {MAX_SECRET_LENGTH} characters")
    if not _BRANCH.match(default_branch) or ".." in default_branch or default_branch.startswith(("/", "-")):
        raise RepoError("default_branch", f"default_branch is not a valid branch name (got {default_branch!r})")
    return name, url


def add_repo(
    factory: sessionmaker,
    tenant_id: str,
    name: str,
    clone_url: str,
    webhook_secret: str,
    default_branch: str = "main",
    github_id: int | None = None,
) -> RepoRecord:
    """Register a repository for ``tenant_id``; raises ``RepoError`` / ``RepoExists``."""
    name, clone_url = validate_registration(name, clone_url, webhook_secret, default_branch)
    row = Repository(
        id=f"repo_{secrets.token_hex(8)}",
        tenant_id=tenant_id,
        name=name,
        clone_url=clone_url,
        webhook_secret=webhook_secret,
        default_branch=default_branch,
        github_id=github_id,
        created_at=utcnow(),
    )
    try:
        with factory.begin() as session:
            session.add(row)
    except IntegrityError:
        raise RepoExists("name", f"repository {name!r} is already registered") from None
    return _record(row)


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
        rows = session.scalars(select(Repository).where(or_(*conditions)).order_by(Repository.id)).all()
    return [WebhookCandidate(repo=_record(r), webhook_secret=r.webhook_secret) for r in rows]
