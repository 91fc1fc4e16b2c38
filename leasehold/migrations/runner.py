"""Bring a database to the newest revision, one process at a time.

Every process that opens the database (API replicas, workers, CLI commands) calls
``upgrade_to_head`` on start, so several may race on a new database. They queue on a lock held
for the whole upgrade: a Postgres transaction-level advisory lock (per schema, so test schemas
in one database do not wait on each other), or on SQLite an ``flock`` on a file beside the
database (SQLite's own locks do not cover Alembic's check-then-create). The first process
migrates; the others find the database at head and do nothing.

1.0 begins the migrations again from one baseline revision (``BASELINE``); a database made
before it, at one of the pre-1.0 revisions or by the older ``create_all`` (leasehold's tables,
no revision), is refused with one line that says so, rather than half-migrated.

Alembic narrates each step at INFO (its context, each revision applied); a process starting
says one line instead, ``database at revision N``, and Alembic's warnings still show.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, inspect, text

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)

SCRIPT_LOCATION = Path(__file__).parent
BASELINE = "1000"
# The revisions before 1.0, which the baseline replaced; a database still at one is refused.
PRE_1_0_REVISIONS = frozenset(f"{number:04d}" for number in range(1, 10))
# Namespaces the advisory lock key, so no other user of pg_advisory_lock collides with it.
LOCK_NAME = "leasehold.migrations:"


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration, built in code: the scripts ship inside the package."""
    with _alembic_quiet():  # importing it sets up its plugins, one INFO line each
        from alembic.config import Config
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    config.attributes["connection"] = connection
    return config


class DatabaseBefore1_0(RuntimeError):
    """The database was made by a leasehold before 1.0, whose revisions 1.0 does not carry."""


def current_revision(connection: Connection) -> str | None:
    """The revision the database is at; ``None`` when Alembic never ran on it."""
    with _alembic_quiet():  # configuring a context names the dialect's, at INFO
        from alembic.runtime.migration import MigrationContext

        return MigrationContext.configure(connection).get_current_revision()


@contextmanager
def _sqlite_file_lock(engine: Engine) -> Iterator[None]:
    database = engine.url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        yield  # one connection's private database: nobody to race with
        return
    fd = os.open(f"{database}.migrate.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def upgrade_to_head(engine: Engine) -> None:
    """Apply every revision the database lacks, in one transaction where the dialect allows.

    Raises ``DatabaseBefore1_0`` for a database made before 1.0, and changes nothing in it.
    """
    sqlite = engine.dialect.name == "sqlite"
    lock = _sqlite_file_lock(engine) if sqlite else _no_lock()
    with lock, engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            connection.execute(
                text("SELECT pg_advisory_xact_lock(hashtext(:name || current_schema()))"), {"name": LOCK_NAME}
            )
        _refuse_before_1_0(connection)
        with _alembic_quiet():
            from alembic import command

            command.upgrade(alembic_config(connection), "head")
        log.info("database at revision %s", current_revision(connection))


def _refuse_before_1_0(connection: Connection) -> None:
    import leasehold.records.tables  # noqa: F401  (every table on Base)
    from leasehold.records.base import Base

    inspector = inspect(connection)
    if inspector.has_table("alembic_version"):
        found = current_revision(connection)
        if found not in PRE_1_0_REVISIONS:
            return
        made_by = f"at revision {found}"
    else:
        ours = sorted(set(Base.metadata.tables) & set(inspector.get_table_names()))
        if not ours:
            return  # a new database (or one that holds only others' tables)
        made_by = f"with leasehold tables ({', '.join(ours[:3])}{', ...' if len(ours) > 3 else ''}) and no revision"
    raise DatabaseBefore1_0(
        f"database {made_by} was made before leasehold 1.0, which does not migrate it (1.0 starts from "
        f"revision {BASELINE}): start on a new database (a new data dir, or an empty Postgres database "
        "or schema), or drop every table in this one"
    )


@contextmanager
def _no_lock() -> Iterator[None]:
    yield


@contextmanager
def _alembic_quiet() -> Iterator[None]:
    # Alembic logs through the ``alembic`` logger (no handler of its own without an ini file),
    # so a process at INFO would print its ~17 lines of plugins, context and steps before
    # anything else. Not thread-safe, like any logger level; the upgrade runs once at start.
    alembic_log = logging.getLogger("alembic")
    level = alembic_log.level
    alembic_log.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        alembic_log.setLevel(level)
