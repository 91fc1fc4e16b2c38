"""Telling a database outage from a bug, and waiting one out.

A failover (Postgres restarted, a replica promoted, a proxy moving) looks to a client like a
refused or dropped connection for seconds to a minute; a busy SQLite file looks like "database
is locked" after its busy timeout. Neither says anything about the request or the job, so the
API answers them 503 with ``Retry-After`` and activities retry them in place for up to
``Settings.database_failover_seconds`` instead of spending Temporal attempts that belong to the
job's own failures. Every other database error (a constraint, a bad query) is raised at once.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import exc as sa_exc
from temporalio import activity
from temporalio.exceptions import CancelledError

from leasehold.retry import FIRST_DELAY_SECONDS, MAX_DELAY_SECONDS

T = TypeVar("T")

# ``Settings.database_failover_seconds``' default, for activities built without settings.
DEFAULT_FAILOVER_SECONDS = 120.0

# SQLite's primary result codes that mean "not now" or "cannot reach the file", not "wrong":
# BUSY and LOCKED after the busy timeout, CANTOPEN and IOERR for a file that went away.
# (SQLITE_ERROR, code 1, is a bad statement or a missing table: a bug, not an outage.)
_SQLITE_UNAVAILABLE = {
    sqlite3.SQLITE_BUSY,
    sqlite3.SQLITE_LOCKED,
    sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_IOERR,
    sqlite3.SQLITE_PROTOCOL,
}


def is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` means the database could not be reached or answered in time (an outage,
    worth retrying later) rather than that the statement itself is wrong."""
    if isinstance(exc, sa_exc.TimeoutError):
        # The pool's checkout timeout: every connection is stuck on a database that went away.
        return True
    if not isinstance(exc, sa_exc.DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    if isinstance(orig, sqlite3.Error):
        # Result codes, never message text: Python 3.11 exposes them on the exception.
        code = getattr(orig, "sqlite_errorcode", None)
        return code is not None and (code & 0xFF) in _SQLITE_UNAVAILABLE
    # psycopg2 raises OperationalError for refused, reset and terminated connections
    # (admin shutdown in a restart) and InterfaceError for a connection already closed.
    return isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError)


def keep_activity_alive() -> None:
    """Heartbeat the running activity, if any, repeating the details it started with.

    For waits before an activity has made progress of its own: an activity that heartbeats
    progress passes its own heartbeat instead, so its newest details are not replaced. Raises
    ``CancelledError`` once the activity was cancelled (delivered by a heartbeat), so a wait
    for the database never outlives the work it is for.
    """
    if not activity.in_activity():
        return
    activity.heartbeat(*activity.info().heartbeat_details)
    if activity.is_cancelled():
        raise CancelledError("cancelled while waiting for the database")


def longest_wait() -> float:
    """The longest sleep between tries: ``MAX_DELAY_SECONDS``, but within the running activity's
    heartbeat timeout (a third of it), so the heartbeats between tries keep its lease."""
    if activity.in_activity():
        timeout = activity.info().heartbeat_timeout
        if timeout:
            return max(0.05, min(MAX_DELAY_SECONDS, timeout.total_seconds() / 3))
    return MAX_DELAY_SECONDS


def failover_window(configured_seconds: float, margin_seconds: float = 2.0) -> float:
    """How long an activity may wait out an outage: ``configured_seconds``, but never past
    its attempt's start-to-close timeout when it has no heartbeat timeout to keep it alive
    (its own retry policy then takes over, as it always did)."""
    if not activity.in_activity():
        return configured_seconds
    info = activity.info()
    if info.heartbeat_timeout or info.start_to_close_timeout is None:
        return configured_seconds
    elapsed = time.time() - info.started_time.timestamp()
    left = info.start_to_close_timeout.total_seconds() - elapsed - margin_seconds
    return max(0.0, min(configured_seconds, left))


def through_outage(
    call: Callable[[], T],
    window_seconds: float,
    what: str,
    log: logging.Logger,
    heartbeat: Callable[[], None] | None = None,
) -> T:
    """``call()``'s result, retrying connection-class errors (``is_connection_error``) with
    capped exponential back-off until ``window_seconds`` are spent; the last such error is
    raised then. Any other error is raised at once. ``heartbeat`` runs during every wait (at
    most ``longest_wait()`` apart), so an activity's heartbeat timeout does not expire while
    the database is away; it may raise (a cancel) to stop waiting.

    The same back-off as ``leasehold.retry.retry_within``, which retries every error of a
    write; this one returns a value and must not retry what a retry cannot fix.
    """
    deadline = time.monotonic() + window_seconds
    longest = longest_wait()
    delay = min(FIRST_DELAY_SECONDS, longest)
    tries = 0
    while True:
        tries += 1
        try:
            return call()
        except Exception as exc:
            if not is_connection_error(exc):
                raise
            if time.monotonic() + delay > deadline:
                log.warning("%s: database unavailable, gave up after %d tries: %s", what, tries, type(exc).__name__)
                raise
            log.warning("%s: database unavailable (try %d), retrying: %s", what, tries, _brief(exc))
        time.sleep(delay)
        delay = min(delay * 2, longest)
        if heartbeat is not None:
            heartbeat()


def _brief(exc: BaseException) -> str:
    # The driver's first line: SQLAlchemy's text adds the statement and its parameters.
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def in_activity(call: Callable[[], T], failover_seconds: float, what: str, log: logging.Logger) -> T:
    """``through_outage`` as an activity uses it around its database work: for
    ``failover_seconds`` (capped by ``failover_window``), heartbeating while it waits
    (``keep_activity_alive``), so the outage spends none of the activity's Temporal attempts.
    ``call`` must be safe to run again from its start (idempotent)."""
    return through_outage(call, failover_window(failover_seconds), what, log, keep_activity_alive)
