"""The schema comes from Alembic migrations, on SQLite and Postgres: a new database, one made
before 1.0 (refused), a second start, several processes starting at once, and the models never
drifting from the migrations."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, select, text

import leasehold.records.tables  # noqa: F401  (every table on Base)
from leasehold.database import init_database, make_engine
from leasehold.migrations.runner import BASELINE, DatabaseBefore1_0, alembic_config
from leasehold.records.api_keys import ApiKey, create_key, lookup
from leasehold.records.base import Base
from testing.harness import REPO_ROOT
from tests.conftest import sqlite_url

READ_MODEL = {"video_jobs", "ci_pushes", "ci_runs", "ci_jobs", "ci_attempts"}
SCRIPTS = ScriptDirectory.from_config(alembic_config())
HEAD = SCRIPTS.get_current_head()


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return sqlite_url(tmp_path)
    return str(request.getfixturevalue("postgres_url"))


def revisions(url: str) -> list[str]:
    """Every row of ``alembic_version`` (one, once migrated)."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return [r[0] for r in conn.execute(text("SELECT version_num FROM alembic_version"))]
    finally:
        engine.dispose()


def tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def drift(url: str, metadata: sa.MetaData = Base.metadata) -> list[Any]:
    """What autogenerate would change to make the migrated database match ``metadata``."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return list(compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata))
    finally:
        engine.dispose()


def test_revisions_form_one_line_from_the_baseline() -> None:
    # Two changes that each add a revision on the same parent make two heads: renumber one.
    assert len(SCRIPTS.get_heads()) == 1, SCRIPTS.get_heads()
    chain = [r.revision for r in SCRIPTS.walk_revisions()]  # head first
    assert chain[-1] == BASELINE
    assert chain == sorted(chain, reverse=True)  # numbered in order


def test_a_new_database_gets_every_table_at_head(db_url: str) -> None:
    init_database(db_url)
    assert revisions(db_url) == [HEAD]
    assert set(Base.metadata.tables) | {"alembic_version"} == tables(db_url)


def test_models_and_migrations_agree(db_url: str) -> None:
    # A column added to a model without a revision (or the reverse) shows here; write the revision.
    init_database(db_url)
    assert drift(db_url) == []


def test_the_drift_check_can_fail(db_url: str) -> None:
    init_database(db_url)
    changed = sa.MetaData()
    for table in Base.metadata.sorted_tables:
        table.to_metadata(changed)
    changed.tables["ci_tenant_plans"].append_column(sa.Column("log_retention_days", sa.Integer, nullable=True))
    [(op, *rest)] = drift(db_url, changed)
    assert op == "add_column" and rest[1] == "ci_tenant_plans"


def test_a_database_at_a_revision_from_before_1_0_is_refused(db_url: str) -> None:
    # 1.0 squashed revisions 0001 to 0009 into its baseline; a database still at one is not touched.
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
        conn.execute(text("INSERT INTO alembic_version VALUES ('0009')"))
    engine.dispose()
    with pytest.raises(DatabaseBefore1_0) as refused:
        init_database(db_url)
    message = str(refused.value)
    assert "\n" not in message and "revision 0009" in message and "new database" in message, message
    assert revisions(db_url) == ["0009"] and tables(db_url) == {"alembic_version"}


def test_a_database_made_by_create_all_before_migrations_is_refused(db_url: str) -> None:
    # What every process did before migrations: create_all of the tables it knew, no revision.
    engine = make_engine(db_url)
    ApiKey.__table__.create(engine)  # type: ignore[attr-defined]
    engine.dispose()
    with pytest.raises(DatabaseBefore1_0, match=r"with leasehold tables \(api_keys\) and no revision"):
        init_database(db_url)
    assert tables(db_url) == {"api_keys"}


def test_a_database_holding_only_other_tables_gets_the_schema(db_url: str) -> None:
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE someone_elses (id INTEGER PRIMARY KEY)"))
    engine.dispose()
    init_database(db_url)
    assert revisions(db_url) == [HEAD]
    assert set(Base.metadata.tables) | {"alembic_version", "someone_elses"} == tables(db_url)


def test_migrating_twice_changes_nothing(db_url: str) -> None:
    factory = init_database(db_url)
    key = create_key(factory, "acme", "bob", "free")
    again = init_database(db_url)
    assert revisions(db_url) == [HEAD]
    assert lookup(again, key) is not None
    with again() as session:
        assert len(session.scalars(select(ApiKey)).all()) == 1


def test_downgrade_to_nothing_and_back(db_url: str) -> None:
    init_database(db_url)
    engine = make_engine(db_url)
    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), "base")
    assert tables(db_url) == {"alembic_version"}
    assert revisions(db_url) == []
    engine.dispose()
    init_database(db_url)
    assert revisions(db_url) == [HEAD] and READ_MODEL <= tables(db_url)


CHILD = """
import sys, time
from pathlib import Path
from typing import Any
from leasehold.database import init_database
url, ready, go = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
ready.touch()
while not go.exists():
    time.sleep(0.01)
init_database(url)
"""


def test_several_processes_starting_at_once_all_succeed(db_url: str, tmp_path: Path) -> None:
    count = 4
    go = tmp_path / "go"
    readies = [tmp_path / f"ready-{i}" for i in range(count)]
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, db_url, str(ready), str(go)],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for ready in readies
    ]
    try:
        deadline = time.monotonic() + 120
        # Every child has imported everything and waits: they all reach the migration together.
        while not all(r.exists() for r in readies):
            assert time.monotonic() < deadline, "children did not start"
            assert all(c.poll() is None for c in children), [c.communicate()[0] for c in children]
            time.sleep(0.05)
        go.touch()
        outcomes = [(c.wait(timeout=120), c.communicate()[0].decode()) for c in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    assert [rc for rc, _ in outcomes] == [0] * count, [out for _, out in outcomes]
    assert revisions(db_url) == [HEAD]
    assert drift(db_url) == []
