"""One stack for the console's browser tests: the API, the orchestration, CI and GPU workers as
real processes against the session's dev server (the CI package's launcher with the video
package's settings), and the system Chromium driven headless by Playwright.

Under ``CI=true`` a missing Chromium or Playwright fails the tests; elsewhere they skip, saying
why. Screenshots go to ``LEASEHOLD_CONSOLE_SCREENSHOTS`` when set, else the test's tmp dir.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from leasehold.database import init_database
from leasehold.records.api_keys import create_key
from leasehold.testing.harness import start_worker
from tests.ci_api.conftest import CIStack, running_ci_stack

CHROMIUM = os.environ.get("LEASEHOLD_CHROMIUM", "/usr/bin/chromium")
MODEL = "procedural-v1"


def _browser_missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[dev]')"
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    return None


@dataclass
class Tenant:
    tenant_id: str
    key: str


@dataclass
class ConsoleStack:
    stack: CIStack
    shots: Path

    @property
    def base_url(self) -> str:
        return self.stack.base_url

    def tenant(self, user_id: str = "user") -> Tenant:
        tenant_id = f"tenant-{secrets.token_hex(4)}"
        key = create_key(init_database(self.stack.settings.resolved_database_url), tenant_id, user_id, "paid")
        return Tenant(tenant_id, key)


@pytest.fixture(scope="package")
def console_stack(temporal_env, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleStack]:  # type: ignore[no-untyped-def]
    missing = _browser_missing()
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"browser tests must run under CI: {missing}")
        pytest.skip(missing)
    root = tmp_path_factory.mktemp("console")
    shots = Path(os.environ.get("LEASEHOLD_CONSOLE_SCREENSHOTS") or root / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    with running_ci_stack(
        temporal_env,
        root,
        checkpoint_interval_seconds=1.0,
        video_heartbeat_timeout_seconds=5.0,
        video_preview_every_steps=4,
        console_temporal_ui_url="http://127.0.0.1:9/ui",
    ) as stack:
        stack.start_workers()
        gpu = start_worker(stack.settings, "gpu", stack.logs, "--model", MODEL)
        stack.workers.append(gpu)
        gpu.wait_healthy(90)
        yield ConsoleStack(stack, shots)


@pytest.fixture(scope="package")
def browser(console_stack: ConsoleStack) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


def sign_in(browser: Any, console: ConsoleStack, tenant: Tenant, **context: Any) -> Any:
    """A fresh browser context signed in as ``tenant`` through the sign-in form."""
    ctx = browser.new_context(base_url=console.base_url, **context)
    ctx.set_default_timeout(30_000)
    page = ctx.new_page()
    page.goto("/console/sign-in")
    page.get_by_label("API key").fill(tenant.key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/console/videos")
    return page
