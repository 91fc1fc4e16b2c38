"""The console's browser tests: the session's CI and video stack (the API, the orchestration,
CI and GPU workers as real processes, shared with tests/cli_people), and the system Chromium
driven headless by Playwright.

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
from tests.ci_api.conftest import CIStack

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without a browser the browser tests skip before their stack starts (not under CI)."""
    del config
    missing = _browser_missing()
    if missing is None or os.environ.get("CI") == "true":
        return
    for item in items:
        if "console_stack" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.skip(reason=missing))


@pytest.fixture(scope="package")
def console_stack(ci_video_stack: CIStack, tmp_path_factory: pytest.TempPathFactory) -> ConsoleStack:
    missing = _browser_missing()
    if missing is not None:
        pytest.fail(f"browser tests must run under CI: {missing}")
    root = tmp_path_factory.mktemp("console")
    shots = Path(os.environ.get("LEASEHOLD_CONSOLE_SCREENSHOTS") or root / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    return ConsoleStack(ci_video_stack, shots)


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
