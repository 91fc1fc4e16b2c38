"""Retrying a blocking write with capped exponential back-off inside a time window."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

FIRST_DELAY_SECONDS = 0.1
MAX_DELAY_SECONDS = 5.0


def retry_within(
    write: Callable[[], object],
    window_seconds: float,
    what: str,
    log: logging.Logger,
    min_tries: int = 1,
    between: Callable[[], None] | None = None,
) -> Exception | None:
    """Call ``write`` until it succeeds (``None``) or the window is spent (the last error).

    At least ``min_tries`` calls are made even when the window is zero; ``between`` runs
    before each retry (a heartbeat, a lease check) and may raise to stop retrying.
    """
    deadline = time.monotonic() + window_seconds
    delay = FIRST_DELAY_SECONDS
    tries = 0
    while True:
        tries += 1
        try:
            write()
            return None
        except Exception as exc:
            log.warning("storing %s failed (try %d): %s", what, tries, exc)
            last = exc
        if tries >= min_tries and time.monotonic() + delay > deadline:
            return last
        time.sleep(delay)
        delay = min(delay * 2, MAX_DELAY_SECONDS)
        if between is not None:
            between()
