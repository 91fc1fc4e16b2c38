"""The check every repository-scoped CI endpoint makes before it reads or writes."""

from __future__ import annotations

import asyncio

from sqlalchemy.orm import sessionmaker

from api.errors import not_found
from leasehold.records.ci.repos import get_repo


async def require_repo(db: sessionmaker, tenant_id: str, repo_id: str | None) -> None:
    """404 ``repository`` unless ``repo_id`` is None (tenant-wide) or a repository of the tenant's:
    another tenant's repository is answered as one that does not exist."""
    if repo_id is not None and await asyncio.to_thread(get_repo, db, tenant_id, repo_id) is None:
        raise not_found("repository")
