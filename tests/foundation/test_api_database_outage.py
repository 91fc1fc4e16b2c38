"""The API while its database is away: a real app over real HTTP (uvicorn in this process) on a
private PostgreSQL that the test stops and starts. Every answer is a 503
``service_unavailable`` with ``Retry-After`` in the error shape, never a 500; ``/healthz`` too;
a submit that could not write its row starts nothing; and the official ``openai`` SDK's own
retries (which honour ``Retry-After``) ride a short outage out.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
from prometheus_client import REGISTRY

from api.app import create_app
from leasehold.database import init_database
from leasehold.records.api_keys import create_key
from leasehold.settings import Settings
from testing.harness import serving
from testing.postgres import PrivatePostgres

MODEL = "procedural-v1"
BODY = {"prompt": "a red kite over the sea", "model": MODEL, "seconds": "1", "size": "180x320", "steps": 4}
RETRY_AFTER = 1
OUTAGE_SECONDS = 4.0


@contextlib.contextmanager
def back_after(server: PrivatePostgres, seconds: float) -> Iterator[None]:
    """Start ``server`` again ``seconds`` from now, from another thread."""
    starter = threading.Thread(target=lambda: (time.sleep(seconds), server.start()), daemon=True)
    starter.start()
    try:
        yield
    finally:
        starter.join(timeout=60)
        assert not starter.is_alive(), "the server did not start again"


def outage_settings(settings: Settings, server: PrivatePostgres) -> Settings:
    return settings.model_copy(
        update={
            "database_url": server.url,
            "api_database_retry_after_seconds": RETRY_AFTER,
            # Long enough that a key verified before the stop is still trusted during it.
            "api_principal_cache_seconds": 30.0,
        }
    )


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers.get("retry-after") == str(RETRY_AFTER)
    error: dict[str, Any] = response.json()["error"]
    assert (error["code"], error["type"]) == ("service_unavailable", "server_error")
    assert "Traceback" not in response.text and "OperationalError" not in response.text


def answered(method: str, route: str, status: int) -> float:
    labels = {"method": method, "route": route, "status": str(status)}
    return REGISTRY.get_sample_value("leasehold_api_requests_total", labels) or 0.0


async def test_every_answer_is_a_503_with_retry_after_while_the_database_is_down(
    settings: Settings, private_postgres: PrivatePostgres
) -> None:
    settings = outage_settings(settings, private_postgres)
    db = init_database(settings.resolved_database_url)
    verified = create_key(db, "acme", "alice", "paid")
    unverified = create_key(db, "acme", "bob", "paid")
    errors_before = answered("GET", "/v1/videos", 500) + answered("POST", "/v1/videos", 500)
    async with serving(create_app(settings)) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:

        def auth(key: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {key}"}

        assert (await http.get("/v1/videos", headers=auth(verified))).status_code == 200
        assert (await http.get("/healthz")).status_code == 200

        await asyncio.to_thread(private_postgres.stop)
        # A key no one verified yet: its lookup meets the outage.
        assert_unavailable(await http.get("/v1/videos", headers=auth(unverified)))
        assert_unavailable(await http.get("/v1/models", headers=auth(unverified)))
        # A key verified a moment ago is still trusted (the principal cache, within its TTL):
        # a route that needs nothing else of the database still answers...
        assert (await http.get("/v1/models", headers=auth(verified))).status_code == 200
        # ...and one that reads the database meets the outage.
        assert_unavailable(await http.get("/v1/videos", headers=auth(verified)))
        assert_unavailable(await http.get("/v1/videos/video_" + "0123456789abcdef" * 2, headers=auth(verified)))
        # A submit whose row cannot be written says so and starts nothing.
        assert_unavailable(await http.post("/v1/videos", json=BODY, headers=auth(verified)))
        assert_unavailable(await http.post("/v1/videos", json=BODY, headers=auth(unverified)))
        # The console answers the same 503 as a page.
        page = await http.get("/console/videos", headers={"Cookie": f"lh_console={verified}"})
        assert page.status_code == 503 and page.headers.get("retry-after") == str(RETRY_AFTER), page.text
        assert "text/html" in page.headers["content-type"] and "Traceback" not in page.text
        health = await http.get("/healthz")
        assert health.status_code == 503 and health.headers.get("retry-after") == str(RETRY_AFTER)
        assert health.json()["checks"]["database"].startswith("unreachable")

        await asyncio.to_thread(private_postgres.start)
        listed = await http.get("/v1/videos", headers=auth(unverified))
        assert listed.status_code == 200, listed.text
        assert listed.json()["data"] == [], "a submit refused with 503 left a job behind"
        assert (await http.get("/healthz")).status_code == 200
    assert answered("GET", "/v1/videos", 500) + answered("POST", "/v1/videos", 500) == errors_before


async def test_the_openai_sdk_rides_a_short_outage_out(settings: Settings, private_postgres: PrivatePostgres) -> None:
    settings = outage_settings(settings, private_postgres)
    db = init_database(settings.resolved_database_url)
    key = create_key(db, "acme", "carol", "paid")
    async with serving(create_app(settings)) as url:
        # Enough retries for the outage at Retry-After apart (the SDK's default is 2).
        sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=12, timeout=30)
        refused_before = answered("POST", "/v1/videos", 503) + answered("GET", "/v1/videos", 503)
        await asyncio.to_thread(private_postgres.stop)
        started = time.monotonic()
        with back_after(private_postgres, OUTAGE_SECONDS):
            video = await sdk.videos.create(prompt="a paper boat", model=MODEL, seconds="1", size="180x320")
            listed = await sdk.videos.list()
        assert time.monotonic() - started >= OUTAGE_SECONDS - 1
        assert video.status == "queued"
        # Exactly the one job: the refused tries wrote nothing.
        assert [v.id for v in listed.data] == [video.id]
        refused = answered("POST", "/v1/videos", 503) + answered("GET", "/v1/videos", 503) - refused_before
        assert refused >= 2, "the SDK never met the outage"
        await sdk.close()
