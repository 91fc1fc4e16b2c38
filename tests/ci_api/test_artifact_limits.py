"""The artifact service's limits, called as ``@actions/artifact`` calls it: Twirp JSON and Azure
blob requests over real HTTP on the attempt's Unix socket, into a real database (SQLite) and a
local object store. What ``test_artifacts_e2e.py`` leaves out, without running a job: the size
limit, the expiry an artifact gets from its tenant's retention, and a token's scope.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from sqlalchemy.orm import sessionmaker

from activities.ci.artifact_runtime import attach_artifacts
from activities.ci.artifact_service import TWIRP, ArtifactScope, ArtifactService
from leasehold.database import init_database
from leasehold.records.ci import artifacts as records
from leasehold.records.ci.plans import set_log_retention
from leasehold.storage import LocalObjectStore
from tests.conftest import sqlite_url
from workflows.ci.types.spec import JobSpec, StepSpec

# Small enough that a test's uploads pass it with a few hundred bytes.
MAX_BYTES = 1000
DEFAULT_DAYS = 90


class Attempt:
    """One attempt's running artifact service and an HTTP client on its socket."""

    def __init__(self, service: ArtifactService) -> None:
        self.service = service
        self.scope = service.scope
        # The service's URLs name 127.0.0.1:<RUNTIME_PORT>; the socket is where they lead.
        self.http = httpx.Client(transport=httpx.HTTPTransport(uds=str(service.socket_path)), timeout=30)

    def call(self, method: str, token: str | None = None, **body: Any) -> httpx.Response:
        """A Twirp call with this attempt's token (or ``token``) and its backend ids unless given."""
        body = {
            "workflow_run_backend_id": self.scope.run_id,
            "workflow_job_run_backend_id": self.scope.job_id,
            **body,
        }
        headers = {"Authorization": f"Bearer {token or self.service.token}"}
        return self.http.post(f"{self.service.base_url}{TWIRP}{method}", json=body, headers=headers)

    def ok(self, method: str, **body: Any) -> dict[str, Any]:
        response = self.call(method, **body)
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    def upload(self, name: str, data: bytes) -> str:
        """Create, upload in one block, finalize (as the client does); the artifact's id."""
        url = self.ok("CreateArtifact", name=name, version=4)["signed_upload_url"]
        block = base64.b64encode(b"block-0").decode()
        assert self.http.put(_block(url, block), content=data).status_code == 201
        blocklist = f"<BlockList><Latest>{block}</Latest></BlockList>".encode()
        assert self.http.put(f"{url}&comp=blocklist", content=blocklist).status_code == 201
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        return str(self.ok("FinalizeArtifact", name=name, size=str(len(data)), hash=digest)["artifact_id"])

    def names(self) -> list[str]:
        return [a["name"] for a in self.ok("ListArtifacts")["artifacts"]]


@pytest.fixture
def db(tmp_path: Path) -> sessionmaker:
    return init_database(sqlite_url(tmp_path))


@pytest.fixture
def store(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "objects", b"k" * 32, "http://127.0.0.1:1")


@pytest.fixture
def runtime_dir() -> Iterator[Path]:
    # A short path of its own: a Unix socket's path is at most 107 bytes, and tmp_path's can be longer.
    path = Path(tempfile.mkdtemp(prefix="lh-art-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def attempt_of(runtime_dir: Path, db: sessionmaker, store: LocalObjectStore) -> Iterator[Callable[..., Attempt]]:
    """Starts an attempt's service as the worker does (``attach_artifacts``); stops them all after."""
    started: list[Attempt] = []
    job = JobSpec(id="make", name="make", steps=[StepSpec(index=0, name="up", uses="./.github/actions/artifact")])

    def start(tenant_id: str = "t1", run_id: str = "run_a") -> Attempt:
        scope = ArtifactScope(tenant_id, "repo_1", run_id, job.id, 1, DEFAULT_DAYS, MAX_BYTES)
        attached = attach_artifacts(runtime_dir, "bubblewrap", db, store, scope, job)
        assert attached is not None
        started.append(Attempt(attached[0]))
        return started[-1]

    yield start
    for attempt in started:
        attempt.http.close()
        attempt.service.stop()


def _block(url: str, block_id: str) -> str:
    """The signed upload URL of one block, as the Azure client adds it to the URL's own query."""
    return f"{url}&comp=block&blockid={quote(block_id, safe='')}"


def _stored(store: LocalObjectStore) -> list[str]:
    return store.list("ci/")


def _expiry(db: sessionmaker, artifact_id: str) -> datetime:
    artifact = records.get_artifact(db, int(artifact_id))
    assert artifact is not None
    expires = artifact.expires_at
    return expires if expires.tzinfo is not None else expires.replace(tzinfo=UTC)


# Size limit -------------------------------------------------------------------------------


def test_an_upload_in_one_request_over_the_limit_is_refused_and_nothing_is_stored(
    attempt_of: Callable[..., Attempt], store: LocalObjectStore
) -> None:
    attempt = attempt_of()
    url = attempt.ok("CreateArtifact", name="big", version=4)["signed_upload_url"]
    refused = attempt.http.put(url, content=b"x" * (MAX_BYTES + 1))
    assert refused.status_code == 413, refused.text
    assert refused.headers["x-ms-error-code"] == "RequestBodyTooLarge"
    finalize = attempt.call("FinalizeArtifact", name="big", size=str(MAX_BYTES + 1))
    assert finalize.status_code == 404, finalize.text
    assert attempt.names() == [] and _stored(store) == []
    # At the limit it is served: the limit is the setting's, not a smaller one.
    attempt.upload("fits", b"y" * MAX_BYTES)
    assert attempt.names() == ["fits"] and len(_stored(store)) == 1


def test_blocks_over_the_limit_are_refused_and_nothing_is_stored(
    attempt_of: Callable[..., Attempt], store: LocalObjectStore
) -> None:
    attempt = attempt_of()
    url = attempt.ok("CreateArtifact", name="blocks", version=4)["signed_upload_url"]
    first, second = (base64.b64encode(f"block-{i}".encode()).decode() for i in range(2))
    half = MAX_BYTES // 2 + 1
    assert attempt.http.put(_block(url, first), content=b"a" * half).status_code == 201
    refused = attempt.http.put(_block(url, second), content=b"b" * half)
    assert refused.status_code == 413, refused.text
    # The block list may name only what was accepted; the artifact never becomes one.
    blocklist = f"<BlockList><Latest>{first}</Latest><Latest>{second}</Latest></BlockList>".encode()
    assert attempt.http.put(f"{url}&comp=blocklist", content=blocklist).status_code == 400
    assert attempt.call("FinalizeArtifact", name="blocks", size=str(2 * half)).status_code == 404
    assert attempt.names() == [] and _stored(store) == []


def test_a_block_list_naming_one_block_many_times_cannot_pass_the_limit(
    attempt_of: Callable[..., Attempt], store: LocalObjectStore
) -> None:
    attempt = attempt_of()
    url = attempt.ok("CreateArtifact", name="repeat", version=4)["signed_upload_url"]
    block = base64.b64encode(b"block-0").decode()
    part = b"r" * (MAX_BYTES // 2 + 1)
    assert attempt.http.put(_block(url, block), content=part).status_code == 201
    blocklist = f"<BlockList>{f'<Latest>{block}</Latest>' * 2}</BlockList>".encode()
    refused = attempt.http.put(f"{url}&comp=blocklist", content=blocklist)
    assert refused.status_code == 413, refused.text
    assert attempt.call("FinalizeArtifact", name="repeat", size=str(2 * len(part))).status_code == 404
    assert attempt.names() == [] and _stored(store) == []


# Retention --------------------------------------------------------------------------------


def _expires_at(when: datetime) -> str:
    # As the client's Timestamp reaches JSON: RFC 3339 in UTC, milliseconds, "Z".
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_an_artifact_expires_with_its_tenants_retention_or_sooner_if_the_upload_asks(
    attempt_of: Callable[..., Attempt], db: sessionmaker
) -> None:
    set_log_retention(db, "short", 7)
    attempt = attempt_of(tenant_id="short")
    before = datetime.now(UTC)
    kept = attempt.upload("kept", b"k")
    after = datetime.now(UTC)
    assert before + timedelta(days=7) <= _expiry(db, kept) <= after + timedelta(days=7)

    # retention-days: 2 is shorter than the tenant's 7: the upload's wins.
    asked = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=0)
    url = attempt.ok("CreateArtifact", name="brief", version=4, expires_at=_expires_at(asked))["signed_upload_url"]
    assert attempt.http.put(url, content=b"b").status_code == 201
    brief = attempt.ok("FinalizeArtifact", name="brief", size="1")["artifact_id"]
    assert _expiry(db, brief) == asked

    # retention-days: 30 is longer than the tenant's 7: the tenant's wins.
    longer = datetime.now(UTC) + timedelta(days=30)
    before = datetime.now(UTC)
    url = attempt.ok("CreateArtifact", name="capped", version=4, expires_at=_expires_at(longer))["signed_upload_url"]
    after = datetime.now(UTC)
    assert attempt.http.put(url, content=b"c").status_code == 201
    capped = attempt.ok("FinalizeArtifact", name="capped", size="1")["artifact_id"]
    assert before + timedelta(days=7) <= _expiry(db, capped) <= after + timedelta(days=7)

    # A tenant without a retention of its own gets the deployment's.
    other = attempt_of(tenant_id="default", run_id="run_b")
    before = datetime.now(UTC)
    plain = other.upload("plain", b"p")
    after = datetime.now(UTC)
    assert before + timedelta(days=DEFAULT_DAYS) <= _expiry(db, plain) <= after + timedelta(days=DEFAULT_DAYS)


# Token scope ------------------------------------------------------------------------------


def test_a_token_reaches_its_own_runs_artifacts_only(
    attempt_of: Callable[..., Attempt], store: LocalObjectStore
) -> None:
    mine = attempt_of(run_id="run_a")
    theirs = attempt_of(run_id="run_b")
    theirs.upload("secret-report", b"theirs")
    mine.upload("report", b"mine")
    assert mine.names() == ["report"] and theirs.names() == ["secret-report"]

    # Another run's backend ids on this attempt's socket, with this attempt's token: refused.
    for method, body in [
        ("ListArtifacts", {}),
        ("GetSignedArtifactURL", {"name": "secret-report"}),
        ("DeleteArtifact", {"name": "secret-report"}),
        ("CreateArtifact", {"name": "planted", "version": 4}),
    ]:
        response = mine.call(method, workflow_run_backend_id="run_b", **body)
        assert response.status_code == 403, (method, response.text)
    # A write names this job; reads may name any job of the run.
    assert mine.call("CreateArtifact", workflow_job_run_backend_id="other-job", name="x", version=4).status_code == 403

    # Another attempt's token is no token here, whatever ids it names.
    for token, run_id in [(theirs.service.token, "run_b"), (theirs.service.token, "run_a"), ("not-a-jwt", "run_a")]:
        response = mine.call("ListArtifacts", token=token, workflow_run_backend_id=run_id)
        assert response.status_code == 401, response.text

    # The other run's download URL does not open on this socket, nor does this run's signature
    # open the other run's artifact.
    their_url = theirs.ok("GetSignedArtifactURL", name="secret-report")["signed_url"]
    assert theirs.http.get(their_url).content == b"theirs"
    assert mine.http.get(their_url).status_code == 403
    my_url = mine.ok("GetSignedArtifactURL", name="report")["signed_url"]
    assert mine.http.get(my_url).content == b"mine"
    their_id = their_url.split("/d", 1)[1].split("?", 1)[0]
    my_id = my_url.split("/d", 1)[1].split("?", 1)[0]
    forged = my_url.replace(f"/d{my_id}?", f"/d{their_id}?")
    assert mine.http.get(forged).status_code == 403
    # Even signed by this service (which never signs another run's artifact), it is not served.
    signed = forged.replace(forged.split("sig=", 1)[1], mine.service._download_sig(int(their_id)))
    assert mine.http.get(signed).status_code == 404
    # Nothing of the other run was touched.
    assert theirs.names() == ["secret-report"] and len(_stored(store)) == 2
