"""Attacks on the API, run over real HTTP against a real ``leasehold api`` process.

Each test plays the attack from issue 11 and asserts it fails while the API stays healthy:
streamed and declared oversized bodies (chunked 200 MB included), deeply nested JSON, a
webhook's signature checked before its body is parsed (GitHub's own test vector), API-key
and signature brute force, ``/metrics`` without its token, the OpenAPI document's error
shapes and the data dir's file modes. Every loop is bounded in count and time; all traffic
goes to 127.0.0.1 (clients bind other loopback addresses to act as other hosts).
"""

from __future__ import annotations

import json
import os
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from api.ci.signatures import signature_of
from api.routers.video import videos
from leasehold.database import init_database
from leasehold.devserver import dev_server_command, find_temporal_binary, free_port
from leasehold.records.api_keys import create_key
from leasehold.settings import Settings
from testing.harness import ManagedProcess, start_api, unique_prefix
from tests.ci_api.conftest import CIStack, running_ci_stack
from workflows import search_attributes as sa

METRICS_TOKEN = "metrics-token-for-tests-0123456789"
WEBHOOK_LIMIT = 25 * 1024 * 1024
# The video create and prediction routes take one image (10 MiB, as a data URL) besides the fields.
VIDEO_BODY_LIMIT = videos.MAX_BODY_BYTES
# GitHub's documented example (docs: "Validating webhook deliveries").
GITHUB_SECRET = "It's a Secret to Everybody"
GITHUB_PAYLOAD = b"Hello, World!"
GITHUB_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
# How much the API's peak resident memory may grow while it refuses a 200 MB body.
MAX_RSS_GROWTH = 50 * 1024 * 1024


@pytest.fixture(scope="module")
def stack(temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CIStack]:
    """The API with a metrics token; throttling set high so the attacks below that fail
    authentication on purpose do not end up measuring the throttle instead."""
    with running_ci_stack(
        temporal_env,
        tmp_path_factory.mktemp("attacks"),
        metrics_token=METRICS_TOKEN,
        api_auth_failures_per_minute=10_000,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def key(stack: CIStack) -> str:
    return create_key(init_database(stack.settings.resolved_database_url), "attacks", "user", "paid")


def _error(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"}, body
    assert {"code", "message", "param", "type"} <= set(body["error"]), body
    return body["error"]


def _peak_rss(pid: int) -> int:
    """The process's peak resident set size (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for pid {pid}")


def _log_has_no_traceback(stack: CIStack) -> None:
    text = (stack.logs / "api.log").read_text(errors="replace")
    assert "Traceback" not in text, text[-4000:]
    assert "RecursionError" not in text, text[-4000:]


# Raw HTTP: httpx sends a whole body before it reads the answer, so an early 413 would show
# up as a broken pipe. A socket lets the test read the answer the moment it arrives.


@dataclass
class RawAnswer:
    status: int
    headers: dict[str, str]
    body: bytes
    sent: int  # body bytes the client got to send before the answer came
    seconds: float


def _read_answer(sock: socket.socket, deadline: float) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data and time.monotonic() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines and lines[0].startswith("HTTP/1.1 "), data[:200]
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length and time.monotonic() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, body


def _answered(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def stream_body(
    base_url: str,
    path: str,
    headers: dict[str, str],
    total: int,
    chunk: int = 1 << 20,
    declared: bool = False,
    timeout: float = 60.0,
) -> RawAnswer:
    """POST ``total`` bytes of ``[`` to ``path``, chunked (or with a declared Content-Length,
    sending no body at all until the server answers), stopping as soon as an answer arrives."""
    port = int(base_url.rsplit(":", 1)[1])
    start = time.monotonic()
    deadline = start + timeout
    framing = {"Content-Length": str(total)} if declared else {"Transfer-Encoding": "chunked"}
    head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": "127.0.0.1", **framing, **headers}.items())
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\n{head}\r\n".encode())
        if declared:
            assert select.select([sock], [], [], 10)[0], "no answer to a declared oversized body"
        else:
            payload = b"[" * chunk
            frame = f"{chunk:x}\r\n".encode() + payload + b"\r\n"
            sock.settimeout(5)
            while sent < total and time.monotonic() < deadline and not _answered(sock):
                try:
                    sock.sendall(frame)
                except OSError:  # the server closed on us: its answer is waiting
                    break
                sent += chunk
            if sent >= total:
                sock.sendall(b"0\r\n\r\n")
        sock.settimeout(10)
        status, answer_headers, body = _read_answer(sock, deadline)
    return RawAnswer(status, answer_headers, body, sent, time.monotonic() - start)


# Body limits ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "limit", "keyed"),
    [
        ("/v1/hooks/github", WEBHOOK_LIMIT, False),  # no key needed to reach it
        ("/v1/repos", 1024 * 1024, True),  # a typed JSON body (FastAPI parses it)
        # JSON or multipart, read by the route itself; room for one image (input_reference).
        ("/v1/videos", VIDEO_BODY_LIMIT, True),
        ("/v1/predictions", VIDEO_BODY_LIMIT, True),
        ("/v1/models/leasehold/procedural-v1/predictions", VIDEO_BODY_LIMIT, True),
    ],
)
def test_chunked_200mb_body_is_cut_off_at_the_limit(
    stack: CIStack, key: str, path: str, limit: int, keyed: bool
) -> None:
    headers = {"Content-Type": "application/json", "X-Hub-Signature-256": "sha256=" + "a" * 64}
    if keyed:
        headers["Authorization"] = f"Bearer {key}"
    peak_before = _peak_rss(stack.api.pid)
    answer = stream_body(stack.base_url, path, headers, total=200 * 1024 * 1024)
    assert answer.status == 413, answer
    refused = json.loads(answer.body)
    if "predictions" in path:
        assert refused["status"] == 413, refused  # Replicate's problem+json shape
    else:
        assert refused["error"]["code"] == "request_too_large"
    # Stopped near the limit (plus what socket buffers took), not after 200 MB.
    assert answer.sent < limit + 16 * 1024 * 1024, answer.sent
    assert _peak_rss(stack.api.pid) - peak_before < MAX_RSS_GROWTH
    assert httpx.get(f"{stack.base_url}/healthz", timeout=10).status_code == 200


def test_declared_oversized_body_is_refused_before_it_is_sent(stack: CIStack) -> None:
    headers = {"Content-Type": "application/json", "X-Hub-Signature-256": "sha256=" + "a" * 64}
    answer = stream_body(stack.base_url, "/v1/hooks/github", headers, total=200 * 1024 * 1024, declared=True)
    assert answer.status == 413 and answer.sent == 0
    assert json.loads(answer.body)["error"]["code"] == "request_too_large"
    assert answer.headers.get("connection") == "close"


def test_bodies_under_the_limit_still_work(stack: CIStack) -> None:
    tenant = stack.new_tenant()
    # A JSON body of ~900 KiB under the 1 MiB default reaches validation (422, not 413).
    big = tenant.post("/v1/repos", json={"name": "acme/x", "clone_url": "x" * (900 * 1024), "webhook_secret": "s" * 16})
    assert big.status_code in (400, 422), big.text
    over = tenant.post("/v1/repos", json={"name": "acme/x", "clone_url": "x" * (1100 * 1024), "webhook_secret": "s"})
    assert over.status_code == 413 and _error(over)["code"] == "request_too_large"


# Parse failures -------------------------------------------------------------------------


def test_nested_json_is_a_400_everywhere(stack: CIStack, key: str) -> None:
    auth = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    with httpx.Client(base_url=stack.base_url, timeout=30) as client:
        # Unsigned (a made-up signature): nothing verifies it, so nothing is parsed past the
        # repository lookup, and the answer is the signature's 401.
        unsigned = client.post(
            "/v1/hooks/github",
            content=b"[" * 100_000,
            headers={"X-Hub-Signature-256": "sha256=" + "b" * 64, "X-GitHub-Event": "push"},
        )
        assert unsigned.status_code == 401 and _error(unsigned)["code"] == "invalid_signature"
        for path, depth in (("/v1/videos", 50_000), ("/v1/repos", 50_000), ("/v1/hooks/push", 100_000)):
            response = client.post(path, content=b"[" * depth, headers=auth)
            assert response.status_code == 400, (path, response.text)
            assert _error(response)["type"] == "invalid_request_error"
        # Valid JSON nested deeply enough to trouble a recursive validator, not the decoder.
        deep = b"[" * 900 + b"]" * 900
        for path in ("/v1/videos", "/v1/repos"):
            response = client.post(path, content=deep, headers=auth)
            assert response.status_code in (400, 422), (path, response.text)
            _error(response)
    _log_has_no_traceback(stack)


def _register(stack: CIStack, secret: str) -> str:
    tenant = stack.new_tenant()
    name = f"octo/hello-{os.urandom(4).hex()}"
    response = tenant.post(
        "/v1/repos", json={"name": name, "clone_url": f"https://github.com/{name}.git", "webhook_secret": secret}
    )
    assert response.status_code == 201, response.text
    return response.json()["id"]


def test_signature_is_checked_on_raw_bytes_before_parsing(stack: CIStack) -> None:
    assert signature_of(GITHUB_SECRET, GITHUB_PAYLOAD) == GITHUB_SIGNATURE
    repo_id = _register(stack, GITHUB_SECRET)
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "push",
        "X-GitHub-Hook-Installation-Target-Type": "repository",
        "X-GitHub-Hook-Installation-Target-ID": repo_id,
    }
    with stack.anonymous() as client:
        # GitHub's test vector verifies; only then is the body read, and it is not JSON: 400.
        vector = client.post(
            "/v1/hooks/github", content=GITHUB_PAYLOAD, headers=headers | {"X-Hub-Signature-256": GITHUB_SIGNATURE}
        )
        assert vector.status_code == 400, vector.text
        assert _error(vector)["code"] == "invalid_payload"
        # The same bytes signed with another secret, or other bytes under the vector's signature: 401.
        wrong = signature_of("another secret", GITHUB_PAYLOAD)
        assert (
            client.post(
                "/v1/hooks/github", content=GITHUB_PAYLOAD, headers=headers | {"X-Hub-Signature-256": wrong}
            ).status_code
            == 401
        )
        tampered = client.post(
            "/v1/hooks/github",
            content=GITHUB_PAYLOAD + b" ",
            headers=headers | {"X-Hub-Signature-256": GITHUB_SIGNATURE},
        )
        assert tampered.status_code == 401 and _error(tampered)["code"] == "invalid_signature"
        # No signature, or not a sha256 one: 401 without the body being looked at.
        for signature in (None, "sha1=" + "0" * 40, "sha256=xyz"):
            extra = {} if signature is None else {"X-Hub-Signature-256": signature}
            response = client.post("/v1/hooks/github", content=b"[" * 100_000, headers=headers | extra)
            assert response.status_code == 401, (signature, response.text)
        # A correctly signed, deeply nested body: past the signature, then a clear 400.
        nested = b"[" * 100_000
        deep = client.post(
            "/v1/hooks/github",
            content=nested,
            headers=headers | {"X-Hub-Signature-256": signature_of(GITHUB_SECRET, nested)},
        )
        assert deep.status_code == 400 and _error(deep)["code"] == "invalid_payload"
        # A correctly signed JSON ping is accepted.
        ping = json.dumps({"zen": "hi"}).encode()
        ok = client.post(
            "/v1/hooks/github",
            content=ping,
            headers=headers | {"X-GitHub-Event": "ping", "X-Hub-Signature-256": signature_of(GITHUB_SECRET, ping)},
        )
        assert ok.status_code == 200, ok.text
    _log_has_no_traceback(stack)


# /metrics and the OpenAPI document ------------------------------------------------------


def test_metrics_need_the_metrics_token(stack: CIStack, key: str) -> None:
    url = f"{stack.base_url}/metrics"
    assert httpx.get(url, timeout=10).status_code == 401
    # A tenant's API key is not the metrics token: metrics describe every tenant.
    assert httpx.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code == 401
    assert (
        httpx.get(url, headers={"Authorization": "Bearer " + METRICS_TOKEN[:-1] + "x"}, timeout=10).status_code == 401
    )
    resp = httpx.get(url, headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10)
    assert resp.status_code == 200 and "leasehold_api_requests_total" in resp.text


def test_openapi_declares_bearer_auth_and_the_real_error_shape(stack: CIStack) -> None:
    doc = httpx.get(f"{stack.base_url}/openapi.json", timeout=10).json()
    schemes = doc["components"]["securitySchemes"]
    assert schemes == {"ApiKey": {"type": "http", "scheme": "bearer", "description": schemes["ApiKey"]["description"]}}
    error = doc["components"]["schemas"]["ErrorResponse"]
    assert error["required"] == ["error"]
    detail = doc["components"]["schemas"]["ErrorDetail"]
    assert {"code", "message", "param", "type"} <= set(detail["properties"])
    assert "HTTPValidationError" not in json.dumps(doc) and '"detail"' not in json.dumps(doc["components"])

    def responses(method: str, path: str) -> dict:
        return doc["paths"][path][method]["responses"]

    for method, path in (("get", "/v1/repos"), ("post", "/v1/videos"), ("get", "/v1/runs/{run}")):
        assert doc["paths"][path][method]["security"] == [{"ApiKey": []}], path
        assert {"401", "429"} <= set(responses(method, path)), path
    assert "security" not in doc["paths"]["/healthz"]["get"]
    assert {"400", "413", "409", "415"} <= set(responses("post", "/v1/videos"))
    # The OpenAI surface answers every invalid request 400, as OpenAI does; the rest keep 422.
    assert "422" not in responses("post", "/v1/videos")
    assert "422" in responses("post", "/v1/repos")
    assert {"404"} <= set(responses("get", "/v1/runs/{run}"))
    assert {"409"} <= set(responses("post", "/v1/repos"))
    assert {"400", "401", "413", "429", "503"} <= set(responses("post", "/v1/hooks/github"))
    # Every error response of every operation points at the one shape.
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                if status.startswith(("4", "5")) and path != "/healthz":
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/ErrorResponse"}, (method, path, status)


# Throttling and file modes, on an API of their own (default settings, fresh data dir) -----


@pytest.fixture(scope="module")
def fresh_api(
    temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ManagedProcess, str, Settings]]:
    """An API with default throttling and no metrics token, on a data dir that an older
    version left readable to everyone."""
    root = tmp_path_factory.mktemp("fresh-api")
    settings = Settings(
        data_dir=root / "data",
        temporal_address=temporal_env.client.service_client.config.target_host,
        queue_prefix=unique_prefix(),
        api_port=free_port(),
    )
    data = settings.data_dir
    (data / "logs").mkdir(parents=True)
    for name in ("api-key", "secrets-keys", "url-signing-key", "temporal.db", "logs/api.log"):
        (data / name).write_text("old\n")
    init_database(settings.resolved_database_url)
    for path in (data, data / "logs", *data.iterdir(), data / "logs" / "api.log"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    # The secrets keyring was made above as a placeholder; let the API make a real one.
    (data / "secrets-keys").unlink()
    proc, base = start_api(settings, root)
    try:
        proc.wait_healthy(60)
        yield proc, base, settings
    finally:
        proc.stop()


def _mode(path: Path) -> int:
    return path.lstat().st_mode & 0o777


def test_data_dir_files_are_private(fresh_api: tuple[ManagedProcess, str, Settings]) -> None:
    _proc, _base, settings = fresh_api
    data = settings.data_dir
    assert _mode(data) == 0o700
    assert _mode(data / "logs") == 0o700
    for name in ("leasehold.db", "api-key", "url-signing-key", "temporal.db", "logs/api.log", "secrets-keys"):
        assert _mode(data / name) == 0o600, name
    for path in data.iterdir():
        assert _mode(path) & 0o077 == 0, path  # -wal, -shm and anything else made since


def test_temporal_db_and_logs_made_by_up_are_private(tmp_path: Path) -> None:
    """The dev server `leasehold up` starts creates temporal.db owner-only."""
    from cli.up import Child

    data = tmp_path / "data"
    data.mkdir()
    port = free_port()
    child = Child(
        "temporal",
        dev_server_command(find_temporal_binary(), data / "temporal.db", port, None, sa.ALL),
        dict(os.environ),
        data / "logs" / "temporal.log",
        None,
    )
    child.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert child.alive(), child.log_tail()
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2):
                    break
            except OSError:
                time.sleep(0.2)
        time.sleep(1)  # its -wal and -shm files appear as it writes
        made = [p for p in data.iterdir() if p.name.startswith("temporal.db")]
        assert data / "temporal.db" in made
        for path in made:
            assert _mode(path) == 0o600, (path, oct(_mode(path)))
    finally:
        child.stop()


def _from(address: str) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=10)


def test_key_and_signature_brute_force_is_throttled(fresh_api: tuple[ManagedProcess, str, Settings]) -> None:
    proc, base, settings = fresh_api
    good = create_key(init_database(settings.resolved_database_url), "victim", "user", "paid")
    url = f"{base}/v1/repos"
    with _from("127.0.0.1") as attacker, _from("127.0.0.2") as bystander, _from("127.0.0.3") as hook_attacker:
        statuses = []
        for attempt in range(60):  # bounded: 20 fail, then every answer must be 429
            wrong = f"lh_{attempt:016x}_{'x' * 43}"
            resp = attacker.get(url, headers={"Authorization": f"Bearer {wrong}"})
            statuses.append(resp.status_code)
            if resp.status_code == 429:
                break
        assert statuses[:20] == [401] * 20, statuses
        assert statuses[-1] == 429, statuses
        assert _error(resp)["code"] == "too_many_failed_attempts"
        retry_after = int(resp.headers["Retry-After"])
        assert 1 <= retry_after <= 60
        # While throttled, even the right key from that address is not looked at.
        assert attacker.get(url, headers={"Authorization": f"Bearer {good}"}).status_code == 429
        # Another address is not affected.
        assert bystander.get(url, headers={"Authorization": f"Bearer {good}"}).status_code == 200

        # Webhook signatures count the same way, per address.
        headers = {"Content-Type": "application/json", "X-GitHub-Event": "ping"}
        body = json.dumps({"repository": {"full_name": "nobody/nothing"}}).encode()
        hook_statuses = []
        for attempt in range(60):
            signature = signature_of(f"guess-{attempt}", body)
            resp = hook_attacker.post(
                f"{base}/v1/hooks/github", content=body, headers=headers | {"X-Hub-Signature-256": signature}
            )
            hook_statuses.append(resp.status_code)
            if resp.status_code == 429:
                break
        assert hook_statuses[:20] == [401] * 20 and hook_statuses[-1] == 429, hook_statuses
        assert int(resp.headers["Retry-After"]) >= 1
        assert bystander.get(url, headers={"Authorization": f"Bearer {good}"}).status_code == 200
    assert proc.alive()


def test_metrics_are_off_without_a_token(fresh_api: tuple[ManagedProcess, str, Settings]) -> None:
    _proc, base, _settings = fresh_api
    with _from("127.0.0.4") as client:
        resp = client.get(f"{base}/metrics", headers={"Authorization": "Bearer anything"})
    assert resp.status_code == 404
    assert _error(resp)["code"] == "not_found"
