"""Waiting out a database outage (``leasehold.db_retry``) against real servers: a private
PostgreSQL that is stopped and started again, and a SQLite file held locked by another
connection. A CI job's record read (``DatabaseRunRecords``) rides the outage out inside its
activity, heartbeating, instead of failing the attempt.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import sessionmaker
from temporalio import activity
from temporalio.exceptions import CancelledError
from temporalio.testing import ActivityEnvironment

from activities.ci.run_records import DatabaseRunRecords, UntrustedRun
from activities.ci.secrets import ApiSecretSource, SecretRequest, SecretsRefused, SecretsUnavailable
from activities.video.lifecycle import VideoLifecycleActivities
from leasehold.clone_urls import ClonePolicy
from leasehold.database import init_database, make_engine
from leasehold.db_retry import is_connection_error, through_outage
from leasehold.records.ci.plans import set_network
from leasehold.records.ci.repos import add_repo
from leasehold.records.ci.secrets import Keyring
from leasehold.storage import LocalObjectStore
from testing.postgres import PrivatePostgres
from tests.conftest import sqlite_url
from tests.lifecycle.conftest import add_video_job
from workflows.ci.ids import run_id, run_workflow_id
from workflows.ci.types.job import JobActivityInput
from workflows.ci.types.push import PushContext
from workflows.ci.types.spec import JobSpec, StepSpec
from workflows.lifecycle.types import LifecycleBatch, LifecycleInput

log = logging.getLogger(__name__)

SHA = "a" * 40
WORKFLOW = ".github/workflows/ci.yml"
KEYRING = Keyring({"k1": b"\x07" * 32}, "k1")
# Outages in these tests are a few seconds; every wait is bounded well above that.
OUTAGE_SECONDS = 3.0
WINDOW_SECONDS = 30.0


def select_one(factory: sessionmaker) -> int:
    with factory() as session:
        return int(session.execute(text("SELECT 1")).scalar_one())


@contextmanager
def back_after(server: PrivatePostgres, seconds: float) -> Iterator[threading.Thread]:
    """Start ``server`` again ``seconds`` from now, from another thread."""
    starter = threading.Thread(target=lambda: (time.sleep(seconds), server.start()), daemon=True)
    starter.start()
    try:
        yield starter
    finally:
        starter.join(timeout=60)
        assert not starter.is_alive(), "the server did not start again"


def test_connection_class_errors_are_told_from_bugs(private_postgres: PrivatePostgres, tmp_path: Path) -> None:
    factory = init_database(private_postgres.url)
    with pytest.raises(Exception) as bad_sql:
        with factory() as session:
            session.execute(text("SELECT * FROM no_such_table"))
    assert not is_connection_error(bad_sql.value)
    with pytest.raises(IntegrityError) as duplicate:
        with factory.begin() as session:
            session.execute(text("CREATE TABLE t (id int primary key)"))
            session.execute(text("INSERT INTO t VALUES (1), (1)"))
    assert not is_connection_error(duplicate.value)

    # A connection pooled before a restart is dropped by the server ("terminating connection").
    with factory() as session:
        session.execute(text("SELECT 1"))
        private_postgres.restart()
        with pytest.raises(OperationalError) as dropped:
            session.execute(text("SELECT 1"))
    assert is_connection_error(dropped.value)
    private_postgres.stop()
    with pytest.raises(OperationalError) as refused:
        select_one(factory)
    assert is_connection_error(refused.value)

    # SQLite: a write lock held past the busy timeout is an outage; a missing table is not.
    url = sqlite_url(tmp_path)
    with make_engine(url).begin() as conn:
        conn.execute(text("CREATE TABLE t (id int)"))
    holder = sqlite3.connect(tmp_path / "leasehold.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        # A busy timeout of 0.2 s instead of the engine's 30 s: the lock is what is tested.
        quick = create_engine(url, connect_args={"timeout": 0.2})
        with pytest.raises(OperationalError) as locked:
            with quick.begin() as conn:
                conn.execute(text("INSERT INTO t VALUES (1)"))
        assert is_connection_error(locked.value)
        with pytest.raises(OperationalError) as missing:
            with quick.connect() as conn:
                conn.execute(text("SELECT * FROM no_such_table"))
        assert not is_connection_error(missing.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_read_waits_out_a_stopped_server_heartbeating(private_postgres: PrivatePostgres) -> None:
    factory = init_database(private_postgres.url)
    assert select_one(factory) == 1  # a pooled connection, which the stop makes stale
    beats: list[float] = []
    private_postgres.stop()
    started = time.monotonic()
    with back_after(private_postgres, OUTAGE_SECONDS):
        assert through_outage(lambda: select_one(factory), WINDOW_SECONDS, "a read", log, lambda: beats.append(1)) == 1
    waited = time.monotonic() - started
    assert OUTAGE_SECONDS <= waited < WINDOW_SECONDS
    assert len(beats) >= 2, "no heartbeat while the database was away"


def test_the_wait_ends_with_the_window_and_other_errors_are_not_retried(private_postgres: PrivatePostgres) -> None:
    factory = init_database(private_postgres.url)
    calls: list[int] = []

    def bad_query() -> None:
        calls.append(1)
        with factory() as session:
            session.execute(text("SELECT * FROM no_such_table"))

    with pytest.raises(Exception) as bad:
        through_outage(bad_query, WINDOW_SECONDS, "a bad query", log)
    assert not is_connection_error(bad.value) and len(calls) == 1

    private_postgres.stop()
    started = time.monotonic()
    with pytest.raises(OperationalError):
        through_outage(lambda: select_one(factory), 1.0, "a read", log)
    assert time.monotonic() - started < 10


def job_input(tenant: str, repo_id: str) -> JobActivityInput:
    push = PushContext(
        tenant_id=tenant,
        repo_id=repo_id,
        repo_full_name=f"{tenant}/widgets",
        clone_url="https://git.example.com/acme/widgets.git",
        commit_sha=SHA,
        ref="refs/heads/main",
    )
    run = run_id(repo_id, SHA, WORKFLOW)
    return JobActivityInput(
        push=push,
        run_id=run,
        run_workflow_id=run_workflow_id(run),
        workflow_name="ci",
        workflow_path=WORKFLOW,
        job=JobSpec(id="build", name="build", runs_on=["linux"], steps=[StepSpec(index=0, name="t", run="true")]),
    )


def job_environment(inp: JobActivityInput, beats: list[object]) -> ActivityEnvironment:
    env = ActivityEnvironment()
    # As the run workflow schedules the job: from its own workflow, with a heartbeat timeout.
    env.info = dataclasses.replace(
        env.info, workflow_id=inp.run_workflow_id, heartbeat_timeout=timedelta(seconds=15), heartbeat_details=["d"]
    )
    env.on_heartbeat = lambda *details: beats.append(details)
    return env


def test_a_ci_job_record_read_rides_a_failover_out_in_its_activity(private_postgres: PrivatePostgres) -> None:
    factory = init_database(private_postgres.url)
    repo = add_repo(
        factory, "acme", "acme/widgets", "https://git.example.com/acme/widgets.git", "hook-secret-123456",
        policy=ClonePolicy(), keyring=KEYRING,
    )  # fmt: skip
    set_network(factory, "acme", True)
    records = DatabaseRunRecords(factory, failover_seconds=WINDOW_SECONDS)
    inp = job_input("acme", repo.id)
    beats: list[object] = []
    env = job_environment(inp, beats)
    assert env.run(records.verify, inp, inp.run_workflow_id).network_allowed

    private_postgres.restart()  # the pooled connections are stale now
    private_postgres.stop()
    with back_after(private_postgres, OUTAGE_SECONDS):
        trusted = env.run(records.verify, inp, inp.run_workflow_id)
    assert (trusted.tenant_id, trusted.repo_id, trusted.network_allowed) == ("acme", repo.id, True)
    # Heartbeats kept the attempt's lease, repeating the details it started with.
    assert beats and all(details == ("d",) for details in beats)

    # The records' own refusal is not an outage: raised at once, never retried.
    stranger = job_input("evil", repo.id)
    started = time.monotonic()
    with pytest.raises(UntrustedRun):
        job_environment(stranger, []).run(records.verify, stranger, stranger.run_workflow_id)
    assert time.monotonic() - started < OUTAGE_SECONDS


def test_a_cancel_ends_the_wait(private_postgres: PrivatePostgres) -> None:
    factory = init_database(private_postgres.url)
    records = DatabaseRunRecords(factory, failover_seconds=WINDOW_SECONDS)
    inp = job_input("acme", "repo_x")
    env = job_environment(inp, [])

    def run_job(inp: JobActivityInput) -> object:
        # As the job activity does: a cancel is seen in heartbeats, never raised into the thread.
        with activity.shield_thread_cancel_exception():
            return records.verify(inp, inp.run_workflow_id)

    private_postgres.stop()
    threading.Timer(1.0, env.cancel).start()
    started = time.monotonic()
    with pytest.raises(CancelledError):
        env.run(run_job, inp)
    assert time.monotonic() - started < WINDOW_SECONDS / 2


@contextmanager
def broker(statuses: list[int]) -> Iterator[tuple[str, list[int]]]:
    """A loopback HTTP server answering ``statuses`` in turn (the last one from then on); the
    URL and the statuses it gave."""
    given: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            status = statuses[min(len(given), len(statuses) - 1)]
            given.append(status)
            body = json.dumps({"secrets": {"TOKEN": "s3cret"}} if status == 200 else {"error": {}}).encode()
            self.send_response(status)
            if status == 503:
                self.send_header("Retry-After", "0")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", given
    finally:
        server.shutdown()
        server.server_close()


def test_the_secrets_broker_is_asked_again_while_its_database_is_away() -> None:
    request = SecretRequest("run_1", "build", 1, "token", ["TOKEN"])
    beats: list[int] = []
    with broker([503, 503, 503, 200]) as (url, given):
        found = ApiSecretSource(url, failover_seconds=WINDOW_SECONDS, heartbeat=lambda: beats.append(1)).fetch(request)
    assert found == {"TOKEN": "s3cret"} and given == [503, 503, 503, 200]
    assert len(beats) == 3, "no heartbeat between the tries"

    # A refusal is final at once; an outage longer than the window ends as unavailable.
    with broker([404]) as (url, given):
        with pytest.raises(SecretsRefused):
            ApiSecretSource(url, failover_seconds=WINDOW_SECONDS).fetch(request)
    assert given == [404]
    with broker([503]) as (url, given):
        started = time.monotonic()
        with pytest.raises(SecretsUnavailable):
            ApiSecretSource(url, failover_seconds=1.0).fetch(request)
    assert len(given) >= 2 and time.monotonic() - started < 5


def test_a_lifecycle_batch_waits_out_a_failover(private_postgres: PrivatePostgres, tmp_path: Path) -> None:
    factory = init_database(private_postgres.url)
    store = LocalObjectStore(tmp_path / "objects", b"k" * 32, "http://127.0.0.1:1")
    store.put("videos/vid_failed/attempt-1/checkpoint-000001.pt", b"checkpoint")
    add_video_job(factory, "vid_failed", "failed", completed_ago=timedelta(hours=3))
    activities = VideoLifecycleActivities(store, factory, failover_seconds=WINDOW_SECONDS)
    beats: list[object] = []
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=60), heartbeat_details=[])
    env.on_heartbeat = lambda *details: beats.append(details)
    batch = LifecycleBatch(input=LifecycleInput(batch_size=10, grace_seconds=3600, window_seconds=2 * 86400))

    private_postgres.restart()  # the pooled connections are stale now
    private_postgres.stop()
    started = time.monotonic()
    with back_after(private_postgres, OUTAGE_SECONDS):
        result = env.run(activities.sweep_video_orphans, batch)
    assert (result.processed, result.deleted_objects) == (1, 1)
    assert store.list("videos/vid_failed/") == []
    assert time.monotonic() - started >= OUTAGE_SECONDS and len(beats) >= 2
