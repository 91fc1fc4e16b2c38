"""The artifact service a job's actions reach, as on GitHub: ``@actions/artifact`` (the library
``actions/upload-artifact@v4`` and ``download-artifact@v4`` are built on) works unchanged.

What a job sees: ``ACTIONS_RESULTS_URL=http://127.0.0.1:<RUNTIME_PORT>/`` and
``ACTIONS_RUNTIME_TOKEN`` (a JWT whose ``scp`` claim names the run and job, as the library reads
it). Each of the job's sandboxed processes has no network; a forwarder in its sandbox
(``runtime_forwarder.py``, run as the job's user) carries that port to this service's Unix
socket, which exists for one attempt and is bound into that attempt's sandboxes only: holding
the socket is holding the attempt's scope, and the token is checked besides.

The protocol is the results service's (Twirp JSON under
``/twirp/github.actions.results.api.v1.ArtifactService/``): ``CreateArtifact`` answers a
signed upload URL, to which the client uploads the zip as an Azure block blob
(``comp=block`` then ``comp=blocklist``, or one ``PUT``); ``FinalizeArtifact`` checks size and
sha256 and stores the zip in the object store; ``ListArtifacts``, ``GetSignedArtifactURL`` (a
plain ``GET`` of the zip) and ``DeleteArtifact`` serve the run's artifacts. Bytes are spooled
in the worker's own directory and never opened as anything but bytes: the worker does not
unzip what a job uploads.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import shutil
import socketserver
import threading
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sqlalchemy.orm import sessionmaker

from leasehold.records.ci import artifacts as records
from leasehold.storage import ObjectNotFound, ObjectStore

log = logging.getLogger(__name__)

RUNTIME_PORT = 24880
TWIRP = "/twirp/github.actions.results.api.v1.ArtifactService/"
BLOB = "/leasehold/artifacts/"
# GitHub refuses these in artifact names (upload-artifact's own check).
BAD_NAME = re.compile(r'["\\:<>|*?\r\n/]')
MAX_NAME = 256
MAX_BLOCKS = 50_000
CHUNK = 1 << 16


@dataclass(frozen=True)
class ArtifactScope:
    """The attempt a service serves."""

    tenant_id: str
    repo_id: str
    run_id: str
    job_id: str
    attempt: int
    retention_days: int
    max_bytes: int = 2 << 30


def runtime_token(scope: ArtifactScope, secret: str) -> str:
    """``ACTIONS_RUNTIME_TOKEN``: a JWT the library decodes for ``scp`` (run and job); its
    signature is an HMAC under the attempt's service secret, which only the worker holds."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = {"scp": f"Actions.Results:{scope.run_id}:{scope.job_id}", "attempt": scope.attempt}
    payload = b64(json.dumps(claims).encode())
    signature = hmac.new(secret.encode(), f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{b64(signature)}"


class TwirpError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class _Upload:
    artifact: records.Artifact
    secret: str
    blob: Path | None = None
    blocks: set[str] = field(default_factory=set)
    # Bytes of the blocks spooled so far (the artifact's size limit counts them).
    spooled: int = 0


class ArtifactService:
    """One attempt's artifact service on a Unix socket (see the module docstring)."""

    def __init__(
        self, socket_path: Path, spool: Path, scope: ArtifactScope, store: ObjectStore, db: sessionmaker
    ) -> None:
        self.socket_path, self.spool, self.scope = socket_path, spool, scope
        self.store, self.db = store, db
        self.secret = base64.urlsafe_b64encode(os.urandom(24)).decode()
        self.token = runtime_token(scope, self.secret)
        self.base_url = f"http://127.0.0.1:{RUNTIME_PORT}"
        self._uploads: dict[str, _Upload] = {}
        self._lock = threading.Lock()
        self._server: socketserver.ThreadingUnixStreamServer | None = None

    # Lifecycle ---------------------------------------------------------------------------

    def start(self) -> ArtifactService:
        self.spool.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.socket_path.parent.mkdir(parents=True, exist_ok=True, mode=0o711)
        self.socket_path.unlink(missing_ok=True)
        service = self

        class Handler(_Handler):
            owner = service

        server = socketserver.ThreadingUnixStreamServer(str(self.socket_path), Handler)
        server.daemon_threads = True
        # The job's user connects through the bind mount; nobody else can reach the path.
        os.chmod(self.socket_path, 0o666)
        threading.Thread(target=server.serve_forever, name=f"artifacts-{self.scope.job_id}", daemon=True).start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.socket_path.unlink(missing_ok=True)
        shutil.rmtree(self.spool, ignore_errors=True)

    def env(self) -> dict[str, str]:
        return {"ACTIONS_RESULTS_URL": f"{self.base_url}/", "ACTIONS_RUNTIME_TOKEN": self.token}

    # Twirp -------------------------------------------------------------------------------

    def call(self, method: str, auth: str, body: dict[str, Any]) -> dict[str, Any]:
        if not hmac.compare_digest(auth, f"Bearer {self.token}"):
            raise TwirpError(401, "unauthenticated", "invalid runtime token")
        run, job = body.get("workflow_run_backend_id"), body.get("workflow_job_run_backend_id")
        # Reads name the artifact's own job (any job of the run); writes only this job.
        writes = method in ("CreateArtifact", "FinalizeArtifact", "DeleteArtifact")
        if run != self.scope.run_id or (writes and job != self.scope.job_id):
            raise TwirpError(403, "permission_denied", "the backend ids are not this job's")
        handlers = {
            "CreateArtifact": self._create,
            "FinalizeArtifact": self._finalize,
            "ListArtifacts": self._list,
            "GetSignedArtifactURL": self._signed_url,
            "DeleteArtifact": self._delete,
        }
        handler = handlers.get(method)
        if handler is None:
            raise TwirpError(404, "bad_route", f"no method {method}")
        return handler(body)

    def _name(self, body: dict[str, Any]) -> str:
        name = body.get("name")
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME or BAD_NAME.search(name):
            raise TwirpError(400, "invalid_argument", f"invalid artifact name {name!r}")
        return name

    def _create(self, body: dict[str, Any]) -> dict[str, Any]:
        name = self._name(body)
        if int(body.get("version", 4)) != 4:
            raise TwirpError(400, "invalid_argument", "only artifact version 4 is served")
        expires = datetime.now(UTC) + timedelta(days=self.scope.retention_days)
        asked = body.get("expires_at")
        if isinstance(asked, str):
            try:
                expires = min(expires, datetime.fromisoformat(asked.replace("Z", "+00:00")))
            except ValueError:
                raise TwirpError(400, "invalid_argument", "expires_at is not a timestamp") from None
        s = self.scope
        try:
            artifact, replaced = records.start_upload(
                self.db, s.tenant_id, s.repo_id, s.run_id, s.job_id, s.attempt, name, expires
            )
        except records.ArtifactConflict as exc:
            raise TwirpError(409, "already_exists", str(exc)) from None
        if replaced:
            self.store.delete(replaced)
        secret = base64.urlsafe_b64encode(os.urandom(18)).decode()
        with self._lock:
            self._uploads[name] = _Upload(artifact, secret)
        url = f"{self.base_url}{BLOB}u{artifact.id}?sig={secret}"
        return {"ok": True, "signed_upload_url": url}

    def _finalize(self, body: dict[str, Any]) -> dict[str, Any]:
        name = self._name(body)
        with self._lock:
            upload = self._uploads.pop(name, None)
        if upload is None or upload.blob is None:
            raise TwirpError(404, "not_found", f"no finished upload of {name!r}")
        size = upload.blob.stat().st_size
        if str(size) != str(body.get("size", size)):
            raise TwirpError(
                400, "invalid_argument", f"size {body.get('size')} does not match the {size} bytes uploaded"
            )
        digest = "sha256:" + _sha256(upload.blob)
        asked = body.get("hash")
        if isinstance(asked, str) and asked and asked != digest:
            raise TwirpError(400, "invalid_argument", "hash does not match the bytes uploaded")
        self.store.put_file(upload.artifact.object_key, upload.blob, "application/zip")
        upload.blob.unlink(missing_ok=True)
        records.finalize(self.db, upload.artifact.id, size, digest)
        log.info("artifact %s of %s/%s: %d bytes", name, self.scope.run_id, self.scope.job_id, size)
        return {"ok": True, "artifact_id": str(upload.artifact.id)}

    def _list(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body.get("name_filter") if isinstance(body.get("name_filter"), str) else None
        wanted = body.get("id_filter")
        artifact_id = int(wanted) if isinstance(wanted, str | int) and str(wanted).isdigit() else None
        found = records.run_artifacts(self.db, self.scope.run_id, name, artifact_id)
        return {
            "artifacts": [
                {
                    "workflow_run_backend_id": a.run_id,
                    "workflow_job_run_backend_id": a.job_id,
                    "database_id": str(a.id),
                    "name": a.name,
                    "size": str(a.size),
                    "created_at": a.created_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    **({"digest": a.digest} if a.digest else {}),
                }
                for a in found
            ]
        }

    def _signed_url(self, body: dict[str, Any]) -> dict[str, Any]:
        (artifact,) = self._one(self._name(body))
        return {"signed_url": f"{self.base_url}{BLOB}d{artifact.id}?sig={self._download_sig(artifact.id)}"}

    def _delete(self, body: dict[str, Any]) -> dict[str, Any]:
        (artifact,) = self._one(self._name(body))
        records.delete_artifact(self.db, artifact.id)
        self.store.delete(artifact.object_key)
        return {"ok": True, "artifact_id": str(artifact.id)}

    def _one(self, name: str) -> list[records.Artifact]:
        found = records.run_artifacts(self.db, self.scope.run_id, name)
        if not found:
            raise TwirpError(404, "not_found", f"no artifact named {name!r} in this run")
        return found[:1]

    def _download_sig(self, artifact_id: int) -> str:
        return hmac.new(self.secret.encode(), f"download:{artifact_id}".encode(), hashlib.sha256).hexdigest()

    # Blobs -------------------------------------------------------------------------------

    def upload_of(self, blob_id: str, sig: str) -> _Upload:
        with self._lock:
            for upload in self._uploads.values():
                if f"u{upload.artifact.id}" == blob_id and hmac.compare_digest(upload.secret, sig):
                    return upload
        raise TwirpError(403, "AuthenticationFailed", "the upload URL is not valid")

    def put_block(self, upload: _Upload, block_id: str, reader: Any, length: int) -> None:
        if len(upload.blocks) >= MAX_BLOCKS or length < 0:
            raise TwirpError(400, "InvalidInput", "too many blocks")
        if upload.spooled + length > self.scope.max_bytes:
            raise TwirpError(413, "RequestBodyTooLarge", f"an artifact is at most {self.scope.max_bytes} bytes")
        folder = self.spool / f"u{upload.artifact.id}"
        folder.mkdir(exist_ok=True, mode=0o700)
        path = folder / hashlib.sha256(block_id.encode()).hexdigest()
        # A block sent again replaces its earlier bytes.
        upload.spooled -= path.stat().st_size if path.exists() else 0
        _copy(reader, path, length)
        upload.spooled += length
        upload.blocks.add(block_id)

    def commit_blocks(self, upload: _Upload, xml: bytes) -> None:
        try:
            tree = ElementTree.fromstring(xml)
        except ElementTree.ParseError:
            raise TwirpError(400, "InvalidXmlDocument", "the block list is not XML") from None
        ids = [e.text or "" for e in tree if e.tag in ("Latest", "Uncommitted", "Committed")]
        missing = [i for i in ids if i not in upload.blocks]
        if missing:
            raise TwirpError(400, "InvalidBlockList", "the block list names blocks never uploaded")
        folder = self.spool / f"u{upload.artifact.id}"
        parts = [folder / hashlib.sha256(block_id.encode()).hexdigest() for block_id in ids]
        # A list may name one block many times: the artifact is what the list adds up to, which
        # the spooled bytes checked by put_block do not bound.
        if sum(part.stat().st_size for part in parts) > self.scope.max_bytes:
            raise TwirpError(413, "RequestBodyTooLarge", f"an artifact is at most {self.scope.max_bytes} bytes")
        target = self.spool / f"u{upload.artifact.id}.zip"
        with target.open("wb") as out:
            for path in parts:
                with path.open("rb") as part:
                    shutil.copyfileobj(part, out, CHUNK)
        shutil.rmtree(folder, ignore_errors=True)
        upload.blob = target

    def put_whole(self, upload: _Upload, reader: Any, length: int) -> None:
        if length > self.scope.max_bytes:
            raise TwirpError(413, "RequestBodyTooLarge", f"an artifact is at most {self.scope.max_bytes} bytes")
        target = self.spool / f"u{upload.artifact.id}.zip"
        _copy(reader, target, length)
        upload.blob = target

    def download(self, blob_id: str, sig: str) -> records.Artifact:
        if not blob_id.startswith("d") or not blob_id[1:].isdigit():
            raise TwirpError(404, "BlobNotFound", "no such blob")
        artifact_id = int(blob_id[1:])
        if not hmac.compare_digest(self._download_sig(artifact_id), sig):
            raise TwirpError(403, "AuthenticationFailed", "the download URL is not valid")
        artifact = records.get_artifact(self.db, artifact_id)
        if artifact is None or artifact.run_id != self.scope.run_id or artifact.state != records.FINALIZED:
            raise TwirpError(404, "BlobNotFound", "no such blob")
        return artifact


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _copy(reader: Any, path: Path, length: int) -> None:
    left = length
    with path.open("wb") as out:
        while left > 0:
            chunk = reader.read(min(CHUNK, left))
            if not chunk:
                raise TwirpError(400, "InvalidInput", "the body ended early")
            out.write(chunk)
            left -= len(chunk)


# How much of a refused request's unread body is read and dropped before the answer, so that
# the client reads the refusal instead of a connection reset (closing a socket with unread
# bytes resets it); past this the connection is just closed.
DRAIN_LIMIT = 8 << 20


class _Body:
    """A request body of ``length`` bytes that knows how much of it is still unread."""

    def __init__(self, raw: Any, length: int) -> None:
        self._raw, self.left = raw, max(0, length)

    def read(self, size: int = -1) -> bytes:
        size = self.left if size < 0 else min(size, self.left)
        data = self._raw.read(size) if size > 0 else b""
        self.left -= len(data)
        return data

    def drain(self) -> None:
        while 0 < self.left <= DRAIN_LIMIT and self.read(CHUNK):
            pass


class _Handler(BaseHTTPRequestHandler):
    owner: ArtifactService
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("artifact service: " + format, *args)

    def _answer(self, status: int, body: bytes = b"", content_type: str = "application/json", **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-ms-request-id", base64.b16encode(os.urandom(8)).decode())
        self.send_header("x-ms-version", "2024-11-04")
        for key, value in headers.items():
            self.send_header(key.replace("_", "-"), value)
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _fail(self, exc: TwirpError, twirp: bool) -> None:
        # A connection about to close says so: a client that put it back in its pool would send
        # its next request into the closed socket and read a reset.
        closing = {"Connection": "close"} if self.close_connection else {}
        if twirp:
            self._answer(exc.status, json.dumps({"code": exc.code, "msg": exc.message}).encode(), **closing)
        else:
            xml = f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{exc.code}</Code></Error>'
            self._answer(exc.status, xml.encode(), "application/xml", x_ms_error_code=exc.code, **closing)

    def _length(self) -> int:
        try:
            return int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise TwirpError(411, "MissingContentLengthHeader", "Content-Length is required") from None

    def do_POST(self) -> None:
        try:
            if not self.path.startswith(TWIRP):
                raise TwirpError(404, "bad_route", "no such route")
            length = self._length()
            if length > 1 << 20:
                raise TwirpError(400, "malformed", "request too large")
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                raise TwirpError(400, "malformed", "the body is not JSON") from None
            if not isinstance(body, dict):
                raise TwirpError(400, "malformed", "the body is not a JSON object")
            answer = self.owner.call(self.path[len(TWIRP) :], self.headers.get("Authorization", ""), body)
            self._answer(200, json.dumps(answer).encode())
        except TwirpError as exc:
            self._fail(exc, True)
        except Exception:
            log.exception("artifact service failed a call")
            self._fail(TwirpError(503, "unavailable", "the artifact service failed; try again"), True)

    def _blob(self) -> tuple[str, dict[str, str]]:
        parts = urlsplit(self.path)
        if not parts.path.startswith(BLOB):
            raise TwirpError(404, "BlobNotFound", "no such blob")
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        return parts.path[len(BLOB) :], query

    def do_PUT(self) -> None:
        body: _Body | None = None
        try:
            blob_id, query = self._blob()
            upload = self.owner.upload_of(blob_id, query.get("sig", ""))
            length = self._length()
            body = _Body(self.rfile, length)
            comp = query.get("comp")
            if comp == "block":
                self.owner.put_block(upload, query.get("blockid", ""), body, length)
            elif comp == "blocklist":
                if length > 8 << 20:
                    raise TwirpError(400, "InvalidInput", "block list too large")
                self.owner.commit_blocks(upload, body.read(length))
            elif comp is None:
                self.owner.put_whole(upload, body, length)
            else:
                raise TwirpError(400, "InvalidQueryParameterValue", f"comp={comp} is not served")
            self._answer(201, content_type="application/octet-stream", ETag=f'"{os.urandom(8).hex()}"')
        except TwirpError as exc:
            self.close_connection = True
            if body is None:
                # Refused before the body was looked at (a bad URL or signature): still unread.
                with contextlib.suppress(TwirpError):
                    body = _Body(self.rfile, self._length())
            if body is not None:
                body.drain()
            self._fail(exc, False)

    def do_GET(self) -> None:
        try:
            blob_id, query = self._blob()
            artifact = self.owner.download(blob_id, query.get("sig", ""))
            size = self.owner.store.size(artifact.object_key)
            self.send_response(200)
            self.send_header("Content-Type", "application/zip")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            for chunk in self.owner.store.open_stream(artifact.object_key):
                self.wfile.write(chunk)
        except TwirpError as exc:
            self._fail(exc, False)
        except ObjectNotFound:
            self._fail(TwirpError(404, "BlobNotFound", "no such blob"), False)
