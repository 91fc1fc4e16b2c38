"""GitHub's REST description for the status reporter's tests, read once per session."""

from __future__ import annotations

import pytest

from tests.github_standin import Description, description_path


@pytest.fixture(scope="session")
def github_description() -> Description:
    return Description(description_path())
