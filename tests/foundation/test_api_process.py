"""A real ``leasehold api`` process: auth, health, metrics and signed local downloads over HTTP."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update
from temporalio.testing import WorkflowEnvironment

from leasehold.database import init_database
from leasehold.devserver import free_port
from leasehold.records.api_keys import ApiKey, create_key, lookup
from leasehold.settings import Settings
from leasehold.storage import LocalObjectStore
from testing.harness import REPO_ROOT, ManagedProcess, process_env, start_api, start_worker, unique_prefix

# Any authenticated route serves to check auth; listing the caller's repositories has no side effects.
AUTHED = "/v1/repos"
METRICS_TOKEN = "api-process-metrics-token"


@pytest.fixture(scope="module")
def api_settings(temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(
        data_dir=tmp_path_factory.mktemp("api") / "data",
        temporal_address=temporal_env.client.service_client.config.target_host,
        queue_prefix=unique_prefix(),
        api_port=free_port(),
        metrics_token=METRICS_TOKEN,
    )


@pytest.fixture(scope="module")
def api(api_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, base = start_api(api_settings, tmp_path_factory.mktemp("api-logs"))
    try:
        proc.wait_healthy(timeout=60)
        yield base
    finally:
        proc.stop()


def _error(resp: httpx.Response) -> dict:
    body = resp.json()
    assert set(body) == {"error"}
    assert {"code", "message", "param", "type"} <= set(body["error"])
    return body["error"]


def test_healthz_reports_temporal_and_database(api: str) -> None:
    resp = httpx.get(f"{api}/healthz", timeout=10)
    assert resp.status_code == 200
    assert resp.json() == {"status": "ok", "checks": {"temporal": "ok", "database": "ok"}}


def test_missing_key_is_401_with_json_error(api: str) -> None:
    resp = httpx.get(f"{api}{AUTHED}", timeout=10)
    assert resp.status_code == 401
    assert resp.headers["www-authenticate"] == "Bearer"
    error = _error(resp)
    assert error["code"] == "unauthorized"
    assert error["type"] == "authentication_error"


@pytest.mark.parametrize(
    "header",
    ["Bearer lh_0000000000000000_wrongwrongwrong", "Bearer not-a-key", "Basic dXNlcjpwYXNz", "Bearer"],
)
def test_wrong_key_is_401(api: str, header: str) -> None:
    resp = httpx.get(f"{api}{AUTHED}", headers={"Authorization": header}, timeout=10)
    assert resp.status_code == 401
    assert _error(resp)["code"] in ("unauthorized", "invalid_api_key")


def test_cli_created_key_works_and_revocation_takes_effect(api: str, api_settings: Settings) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", "keys", "create", "--tenant", "acme", "--user", "alice", "--tier", "paid"],
        env=process_env(api_settings),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    key = result.stdout.strip()
    assert key.startswith("lh_") and "\n" not in key
    headers = {"Authorization": f"Bearer {key}"}
    resp = httpx.get(f"{api}{AUTHED}", headers=headers, timeout=10)
    assert resp.status_code == 200, resp.text

    factory = init_database(api_settings.resolved_database_url)
    principal = lookup(factory, key)
    assert principal is not None and principal.tier == "paid"
    with factory.begin() as session:
        session.execute(update(ApiKey).where(ApiKey.id == principal.key_id).values(revoked_at=datetime.now(UTC)))
    revoked_at = time.monotonic()
    # The API trusts a valid key for api_principal_cache_seconds (1 s by default), no longer.
    while (resp := httpx.get(f"{api}{AUTHED}", headers=headers, timeout=10)).status_code == 200:
        assert time.monotonic() - revoked_at < api_settings.api_principal_cache_seconds + 1.0
        time.sleep(0.05)
    assert resp.status_code == 401
    assert _error(resp)["code"] == "invalid_api_key"


def test_api_metrics(api: str, api_settings: Settings) -> None:
    httpx.get(f"{api}/healthz", timeout=10)
    # Metrics describe every tenant's traffic: the metrics token opens them, nothing else.
    assert httpx.get(f"{api}/metrics", timeout=10).status_code == 401
    resp = httpx.get(f"{api}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain")
    assert 'leasehold_api_requests_total{method="GET",route="/healthz",status="200"}' in resp.text


def _store(settings: Settings, base: str) -> LocalObjectStore:
    # The same directory and signing key the API process uses (both derive from the data dir).
    return LocalObjectStore(settings.resolved_store_dir, settings.signing_key(), base)


def test_signed_local_download(api: str, api_settings: Settings) -> None:
    store = _store(api_settings, api)
    payload = bytes(range(256)) * 500
    store.put("videos/job-1/video.mp4", payload)
    url = store.signed_url("videos/job-1/video.mp4", 60, filename="clip.mp4")
    assert url.startswith(f"{api}/v1/files?")
    resp = httpx.get(url, timeout=10)  # no API key: the signature is the credential
    assert resp.status_code == 200
    assert resp.content == payload
    assert resp.headers["content-type"] == "video/mp4"
    assert 'filename="clip.mp4"' in resp.headers["content-disposition"]


def test_expired_and_tampered_links_are_403(api: str, api_settings: Settings) -> None:
    store = _store(api_settings, api)
    store.put("videos/job-2/video.mp4", b"secret video")
    store.put("videos/job-3/video.mp4", b"another tenant's video")
    expired = store.signed_url("videos/job-2/video.mp4", -5)
    good = httpx.URL(store.signed_url("videos/job-2/video.mp4", 60))
    sig = good.params["sig"]
    tampered_sig = good.copy_set_param("sig", ("A" if sig[0] != "A" else "B") + sig[1:])
    other_key = good.copy_set_param("key", "videos/job-3/video.mp4")
    longer = good.copy_set_param("expires", str(int(good.params["expires"]) + 3600))
    wrong_signer = LocalObjectStore(api_settings.resolved_store_dir, b"x" * 32, api).signed_url(
        "videos/job-2/video.mp4", 60
    )
    for url in (expired, tampered_sig, other_key, longer, wrong_signer):
        resp = httpx.get(url, timeout=10)
        assert resp.status_code == 403, url
        assert _error(resp)["code"] == "invalid_signature"
    assert httpx.get(good, timeout=10).content == b"secret video"


def test_signed_link_to_missing_object_is_404(api: str, api_settings: Settings) -> None:
    url = _store(api_settings, api).signed_url("videos/none/video.mp4", 60)
    resp = httpx.get(url, timeout=10)
    assert resp.status_code == 404
    assert _error(resp)["code"] == "not_found"


def test_api_starts_and_reports_503_without_temporal(tmp_path: Path, logs_dir: Path) -> None:
    closed = free_port()  # nothing listens here
    settings = Settings(data_dir=tmp_path / "data", temporal_address=f"127.0.0.1:{closed}", api_port=free_port())
    proc, base = start_api(settings, logs_dir)
    try:
        body = _poll_health(proc, f"{base}/healthz", expect=503)
        assert body["status"] == "unavailable"
        assert body["checks"]["temporal"].startswith("unreachable")
        assert body["checks"]["database"] == "ok"
        # Auth still works while Temporal is away: requests fail with 401, not 500.
        assert httpx.get(f"{base}{AUTHED}", timeout=10).status_code == 401
        key = create_key(init_database(settings.resolved_database_url), "acme", "u", "free")
        resp = httpx.get(f"{base}{AUTHED}", headers={"Authorization": f"Bearer {key}"}, timeout=10)
        assert resp.status_code == 200
    finally:
        proc.stop()


def _poll_health(proc: ManagedProcess, url: str, expect: int, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.alive(), f"the API exited:\n{proc.log_tail()}"
        try:
            resp = httpx.get(url, timeout=10)
            if resp.status_code == expect:
                return resp.json()
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} never answered {expect}:\n{proc.log_tail()}")


def test_worker_metrics_and_graceful_stop(settings: Settings, logs_dir: Path) -> None:
    worker = start_worker(settings, "orchestration", logs_dir)
    try:
        worker.wait_healthy(timeout=60)
        assert worker.health_url is not None
        resp = httpx.get(worker.health_url.replace("/healthz", "/metrics"), timeout=10)
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/plain")
        assert "# TYPE process_cpu_seconds_total counter" in resp.text or "# TYPE python_info gauge" in resp.text
    finally:
        code = worker.stop()
    assert code == 0, worker.log_tail()
