"""The small relational state beside Temporal, through SQLAlchemy.

SQLite in the data dir by default; Postgres in compose and production. Every model is declared
on ``leasehold.records.base.Base``; the schema itself is made by the Alembic migrations in ``leasehold.migrations``,
which every process runs on start-up (``init_database``), so a database changes shape only
through a recorded revision.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, make_url, text
from sqlalchemy.orm import sessionmaker

from leasehold.data_dir import make_private

# libpq's connect timeout for server databases, unless the URL sets its own.
CONNECT_TIMEOUT_SECONDS = 5


def _private_sqlite_file(url: str) -> None:
    """Create a SQLite file owner-only before SQLite would (0644 less the umask), and tighten an
    existing one; its ``-wal`` and ``-shm`` files take the database file's mode."""
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    try:
        fd = os.open(database, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return  # SQLite reports a path it cannot open, in its own words
    os.close(fd)
    make_private(Path(database))


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL and a busy timeout so several processes share it,
    and its file is owner-only."""
    if url.startswith("sqlite"):
        _private_sqlite_file(url)
        # A pool as large as the threads that query (the event loop's default executor, at most
        # 32 threads, and the capacity refresh): a connection beyond the pool is closed when it
        # is returned, and the next one pays SQLite's schema parse and the pragmas below again,
        # which cost more than the point query it was opened for (status reads: 1.1 ms of CPU
        # each with the default 5, 0.75 ms with enough).
        engine = create_engine(
            url, connect_args={"timeout": 30, "check_same_thread": False}, pool_size=32, max_overflow=16
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record):  # type: ignore[no-untyped-def]
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    # A bounded connect: a database that went away mid-failover (its address not answering at
    # all) must fail a connect within seconds, as a refused one does, so callers can answer 503
    # or retry (``leasehold.db_retry``) instead of hanging on the kernel's TCP timeout.
    parsed = make_url(url)
    libpq = parsed.get_driver_name() in ("psycopg2", "psycopg")
    connect_args = (
        {"connect_timeout": CONNECT_TIMEOUT_SECONDS} if libpq and "connect_timeout" not in parsed.query else {}
    )
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=10, connect_args=connect_args)


def init_database(url: str) -> sessionmaker:
    """Migrate the database to the newest revision and return a session factory.

    Safe to call from several processes at once (they queue on a lock); a database made before
    leasehold 1.0 is refused (``leasehold.migrations.runner.DatabaseBefore1_0``).
    """
    # The table modules declare themselves on ``leasehold.records.base.Base``; they are
    # imported when the database is opened rather than when this module loads; the migrations
    # import alembic, which processes that never open a database need not load.
    import leasehold.records.tables  # noqa: F401
    from leasehold.migrations.runner import upgrade_to_head

    engine = make_engine(url)
    upgrade_to_head(engine)
    return sessionmaker(engine, expire_on_commit=False)


def ping(factory: sessionmaker) -> None:
    """Raise if the database cannot answer a trivial query."""
    with factory() as session:
        session.execute(text("SELECT 1"))
