"""The CI API stack (API, orchestration and CI workers, real git remotes with webhooks) of
``tests.ci_api``, started once for this package."""

from __future__ import annotations

from tests.ci_api.conftest import ci_engine, ci_stack

__all__ = ["ci_engine", "ci_stack"]
