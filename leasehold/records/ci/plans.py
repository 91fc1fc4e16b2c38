"""CI tenant plans: the fairness weight a tenant's jobs dispatch with, its concurrency cap,
whether its jobs may have network (an operator's grant, off by default; never for code from a
fork), and the sandbox its jobs run in (bubblewrap by default; gVisor for tenants that must not
share the host kernel).

A tenant without a row gets the defaults from settings. The API resolves the plan when it
accepts a push and passes it into the run (workflows never read configuration), so a plan
change applies to runs pushed after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, DateTime, Float, Integer, String, select
from sqlalchemy.orm import Mapped, mapped_column, sessionmaker

from leasehold.records.base import Base, utcnow
from leasehold.settings import Settings

MAX_WEIGHT = 1000.0
MAX_CONCURRENT_JOBS = 10_000
# A tenant's CI logs and runs are kept 1 to 3650 days after a run finished.
MIN_LOG_RETENTION_DAYS = 1
MAX_LOG_RETENTION_DAYS = 3650


class CITenantPlan(Base):
    """One tenant's CI plan."""

    __tablename__ = "ci_tenant_plans"

    tenant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    fairness_weight: Mapped[float] = mapped_column(Float)
    max_concurrent_jobs: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class CINetworkGrant(Base):
    """A tenant whose CI jobs may ask for network (``network: true``); absent = refused.

    A table of its own rather than a column of the plan, so databases made before it need no
    migration."""

    __tablename__ = "ci_network_grants"

    tenant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    allowed: Mapped[bool] = mapped_column(Boolean, default=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


def network_allowed(factory: sessionmaker, tenant_id: str) -> bool:
    """Whether the operator let ``tenant_id``'s jobs have (filtered) network."""
    with factory() as session:
        row = session.get(CINetworkGrant, tenant_id)
    return bool(row is not None and row.allowed)


def _put_tenant_row(factory: sessionmaker, model: type[Base], tenant_id: str, **values: Any) -> None:
    """Create or change the tenant's row of ``model`` (keyed by ``tenant_id``) to ``values``."""
    with factory.begin() as session:
        row = session.get(model, tenant_id)
        if row is None:
            row = model(tenant_id=tenant_id)
            session.add(row)
        for name, value in {**values, "updated_at": utcnow()}.items():
            setattr(row, name, value)


def set_network(factory: sessionmaker, tenant_id: str, allowed: bool) -> None:
    """Grant or withdraw network for a tenant's jobs (applies to job attempts started after)."""
    _put_tenant_row(factory, CINetworkGrant, tenant_id, allowed=allowed)


# The sandbox backends a tenant's CI jobs may be assigned (``worker_ci.sandbox``, ``worker_ci.gvisor``).
ISOLATION_BACKENDS = ("bubblewrap", "gvisor")
DEFAULT_ISOLATION = "bubblewrap"


class CIIsolation(Base):
    """The sandbox backend a tenant's CI jobs run in; absent = ``DEFAULT_ISOLATION``.

    A table of its own, like network grants, so choosing gVisor needs no plan row (which would
    pin the default weight and cap) and no existing table changes."""

    __tablename__ = "ci_isolation"

    tenant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    backend: Mapped[str] = mapped_column(String(32))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


def validate_isolation(backend: str) -> None:
    if backend not in ISOLATION_BACKENDS:
        raise ValueError(f"the isolation backend must be one of {', '.join(ISOLATION_BACKENDS)}")


def isolation_backend(factory: sessionmaker, tenant_id: str) -> str:
    """The sandbox backend ``tenant_id``'s jobs must run in (the default without a row)."""
    with factory() as session:
        row = session.get(CIIsolation, tenant_id)
    return DEFAULT_ISOLATION if row is None else row.backend


def set_isolation(factory: sessionmaker, tenant_id: str, backend: str) -> None:
    """Put a tenant's jobs in ``backend`` (applies to job attempts started after);
    ``ValueError`` for a backend that does not exist."""
    validate_isolation(backend)
    _put_tenant_row(factory, CIIsolation, tenant_id, backend=backend)


class CILogRetention(Base):
    """How many days a tenant's finished CI runs and their logs are kept; absent = the default.

    A table of its own, like network grants, so setting it needs no plan row (a plan row would
    pin the default weight and cap) and databases made before it need no migration."""

    __tablename__ = "ci_log_retention"

    tenant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    log_retention_days: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


def validate_log_retention_days(days: int) -> None:
    if not MIN_LOG_RETENTION_DAYS <= days <= MAX_LOG_RETENTION_DAYS:
        raise ValueError(f"log_retention_days must be {MIN_LOG_RETENTION_DAYS} to {MAX_LOG_RETENTION_DAYS}")


def set_log_retention(factory: sessionmaker, tenant_id: str, days: int | None) -> None:
    """Keep ``tenant_id``'s finished runs ``days`` days; ``None`` returns it to the default."""
    if days is not None:
        validate_log_retention_days(days)
        _put_tenant_row(factory, CILogRetention, tenant_id, log_retention_days=days)
        return
    with factory.begin() as session:
        row = session.get(CILogRetention, tenant_id)
        if row is not None:
            session.delete(row)


def log_retention_days(factory: sessionmaker, tenant_id: str) -> int | None:
    """The tenant's own retention in days, or ``None`` (the settings' default applies)."""
    with factory() as session:
        row = session.get(CILogRetention, tenant_id)
    return None if row is None else row.log_retention_days


def retention_overrides(factory: sessionmaker) -> dict[str, int]:
    """Every tenant with a retention of its own (few: the retention job groups runs by it)."""
    with factory() as session:
        return {t: d for t, d in session.execute(select(CILogRetention.tenant_id, CILogRetention.log_retention_days))}


@dataclass(frozen=True)
class TenantPlan:
    tenant_id: str
    fairness_weight: float
    max_concurrent_jobs: int
    # The sandbox backend its jobs run in (``isolation_backend``): a push's jobs go to its queue.
    isolation: str = DEFAULT_ISOLATION


def validate_plan(fairness_weight: float, max_concurrent_jobs: int) -> None:
    if not 0 < fairness_weight <= MAX_WEIGHT:
        raise ValueError(f"the fairness weight must be in (0, {MAX_WEIGHT}]")
    if not 1 <= max_concurrent_jobs <= MAX_CONCURRENT_JOBS:
        raise ValueError(f"max concurrent jobs must be 1 to {MAX_CONCURRENT_JOBS}")


def get_plan(factory: sessionmaker, settings: Settings, tenant_id: str) -> TenantPlan:
    """The tenant's plan, or the defaults; with the sandbox backend its jobs must run in."""
    with factory() as session:
        row = session.get(CITenantPlan, tenant_id)
        isolation = session.get(CIIsolation, tenant_id)
    backend = DEFAULT_ISOLATION if isolation is None else isolation.backend
    if row is None:
        return TenantPlan(
            tenant_id, settings.ci_default_fairness_weight, settings.ci_default_max_concurrent_jobs, backend
        )
    return TenantPlan(tenant_id, row.fairness_weight, row.max_concurrent_jobs, backend)


def set_plan(factory: sessionmaker, tenant_id: str, fairness_weight: float, max_concurrent_jobs: int) -> TenantPlan:
    """Create or change a tenant's plan."""
    validate_plan(fairness_weight, max_concurrent_jobs)
    _put_tenant_row(
        factory, CITenantPlan, tenant_id, fairness_weight=fairness_weight, max_concurrent_jobs=max_concurrent_jobs
    )
    return TenantPlan(tenant_id, fairness_weight, max_concurrent_jobs, isolation_backend(factory, tenant_id))
