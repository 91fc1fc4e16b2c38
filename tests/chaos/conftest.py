"""Chaos fixtures: the run's fault seed (LEASEHOLD_CHAOS_SEED replays a run) and the embedded stack."""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Iterator

import pytest

from testing.stack import EmbeddedStack, start_embedded, stop_embedded

log = logging.getLogger("chaos")

_SEED: list[int] = []


def run_seed() -> int:
    if not _SEED:
        raw = os.environ.get("LEASEHOLD_CHAOS_SEED")
        _SEED.append(int(raw) if raw else random.SystemRandom().randrange(2**31))
    return _SEED[0]


@pytest.fixture(scope="session")
def chaos_seed() -> int:
    """Every fault time and choice derives from this; failures name it, and setting it replays them."""
    seed = run_seed()
    log.warning("chaos seed %d (replay with LEASEHOLD_CHAOS_SEED=%d)", seed, seed)
    return seed


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if _SEED:
        terminalreporter.write_line(f"chaos seed: {_SEED[0]} (replay with LEASEHOLD_CHAOS_SEED={_SEED[0]})")


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    """``leasehold up`` (Temporal on SQLite, API, orchestration, GPU and CI workers) for one module."""
    # Tests create their repositories in their own tmp dirs, all below the session's base temp.
    root = tmp_path_factory.getbasetemp()
    stack = start_embedded(tmp_path_factory.mktemp("embedded"), {"LEASEHOLD_CI_LOCAL_REPO_ROOT": str(root)})
    try:
        yield stack
    finally:
        stop_embedded(stack)
