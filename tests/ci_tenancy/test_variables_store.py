"""The variables store: an environment's variables apart from the repository's, read for a run
by the environments its jobs name, within what the run's own variables left of the per-run bound."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import sessionmaker

from leasehold.database import init_database
from leasehold.records.ci.variables import (
    MAX_VARIABLES_BYTES_PER_RUN,
    VariableError,
    environment_variables_for,
    list_variables,
    put_variable,
    variable_size,
    variables_for,
)
from workflows.ci.types.push import variables_size


@pytest.fixture
def db(tmp_path: Path) -> sessionmaker:
    return init_database(f"sqlite:///{tmp_path / 'db.sqlite'}")


def test_environment_variables_are_read_by_the_environments_named(db: sessionmaker) -> None:
    put_variable(db, "acme", None, "X", "tenant")
    put_variable(db, "acme", "repo_1", "X", "repo")
    put_variable(db, "acme", "repo_1", "X", "staging", environment="Staging")
    put_variable(db, "acme", "repo_1", "Y", "prod", environment="production")
    put_variable(db, "acme", "repo_2", "X", "other repository", environment="staging")
    put_variable(db, "globex", "repo_1", "X", "other tenant", environment="staging")
    # The run's own vars never hold an environment's.
    assert variables_for(db, "acme", "repo_1") == {"X": "repo"}
    assert environment_variables_for(db, "acme", "repo_1", ["STAGING", "qa"], MAX_VARIABLES_BYTES_PER_RUN) == {
        "staging": {"X": "staging"}
    }
    both = environment_variables_for(db, "acme", "repo_1", ["staging", "production"], MAX_VARIABLES_BYTES_PER_RUN)
    assert both == {"production": {"Y": "prod"}, "staging": {"X": "staging"}}
    assert environment_variables_for(db, "acme", "repo_1", [], MAX_VARIABLES_BYTES_PER_RUN) == {}
    assert [(i.name, i.environment) for i in list_variables(db, "acme", "repo_1", "STAGING")] == [("X", "staging")]


def test_environment_variables_are_cut_off_at_what_the_run_left(db: sessionmaker) -> None:
    for name in ("A", "B", "C"):
        put_variable(db, "acme", "repo_1", name, "v" * 10, environment="staging")
    one = variable_size("A", "v" * 10)
    # Whole variables, by name, until the next would not fit.
    read = environment_variables_for(db, "acme", "repo_1", ["staging"], 2 * one + 1)
    assert read == {"staging": {"A": "v" * 10, "B": "v" * 10}}
    assert environment_variables_for(db, "acme", "repo_1", ["staging"], one - 1) == {}
    assert environment_variables_for(db, "acme", "repo_1", ["staging"], 0) == {}
    # The workflow counts a push's variables as the store does.
    assert variables_size({"A": "v" * 10, "É": "é"}) == one + variable_size("É", "é")


def test_an_environment_variable_needs_a_repository_and_a_valid_environment(db: sessionmaker) -> None:
    for repo, environment in ((None, "staging"), ("repo_1", "no spaces"), ("repo_1", "e" * 101)):
        with pytest.raises(VariableError) as refused:
            put_variable(db, "acme", repo, "X", "1", environment=environment)
        assert refused.value.field == "environment"
    assert list_variables(db, "acme", "repo_1") == []
