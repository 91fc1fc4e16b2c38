"""The web console in a real browser (the system Chromium, headless) against the real stack:
sign-in, CSRF and redirects; a video submitted through the form and watched to 100 % and a
playing player; a pushed commit's run graph and live log, an approval, a cancel; a run's
number, times, matrix graph and artifact download; another tenant's cookie getting 404s;
tenant-written text rendered as text, never run."""

from __future__ import annotations

import io
import re
import time
import zipfile
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from leasehold.database import init_database
from leasehold.records.base import utcnow
from leasehold.records.ci.artifacts import finalize, start_upload
from leasehold.storage import open_store
from tests.ci_api.flows import job, push_workflow, sse_events, wait_for, wait_run
from tests.console.conftest import MODEL, ConsoleStack, Tenant, sign_in

pytestmark = pytest.mark.slow

XSS_PROMPT = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script> a kite'
XSS_LOG = '<img src=x onerror="window.__xss=3"><script>window.__xss=4</script>'

WORKFLOW = f"""
name: release
on: push
jobs:
  build:
    runs-on: linux
    steps:
      - run: |
          printf '\\033[31mred alert\\033[0m plain\\n'
          echo '::group::Install things'
          echo 'inside the group'
          echo '::endgroup::'
          echo '{XSS_LOG}'
          echo '::warning title=Careful::{XSS_LOG} warned'
          echo '## Built {XSS_LOG}' >> "$GITHUB_STEP_SUMMARY"
          for i in 1 2 3 4 5 6; do echo "tick $i"; sleep 1; done
      - name: Package
        run: echo packaged
  deploy:
    needs: build
    runs-on: linux
    environment: production
    steps: [{{run: echo deployed}}]
  notify:
    needs: deploy
    runs-on: linux
    steps: [{{run: echo notified}}]
  lint:
    runs-on: linux
    steps: [{{run: 'echo lint failed; exit 3'}}]
"""

MATRIX = """
name: matrixed
on: push
jobs:
  build:
    runs-on: linux
    steps: [{run: echo built}]
  test:
    needs: build
    runs-on: linux
    strategy:
      matrix:
        os: [alpha, beta]
    steps: [{run: 'echo "tested ${{ matrix.os }}"'}]
  report:
    needs: test
    runs-on: linux
    steps: [{run: echo reported}]
"""

SLOW = """
name: slow
on: push
jobs:
  wait:
    runs-on: linux
    steps: [{run: 'echo started; sleep 120'}]
"""


def shot(console: ConsoleStack, page: Any, name: str) -> None:
    page.screenshot(path=str(console.shots / f"{name}.png"), full_page=True)


def api(console: ConsoleStack, tenant: Tenant) -> httpx.Client:
    return httpx.Client(base_url=console.base_url, headers={"Authorization": f"Bearer {tenant.key}"}, timeout=30)


def until(page: Any, expression: str, timeout: float = 30_000) -> None:
    """Wait until ``expression`` is true in the page, asked from outside it: the console's CSP
    forbids eval, so Playwright's in-page ``wait_for_function`` cannot run there."""
    from playwright.sync_api import Error

    deadline = time.monotonic() + timeout / 1000
    while True:
        try:
            if page.evaluate(expression):
                return
        except Error as exc:
            # The run page reloads itself when a job's buttons change; ask the new document.
            if "context was destroyed" not in str(exc):
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout / 1000:.0f}s: {expression}")
        time.sleep(0.1)


def no_script_ran(page: Any) -> None:
    assert page.evaluate("window.__xss") is None, "a tenant-written payload ran as script"


def test_sign_in_csrf_and_redirects(console_stack: ConsoleStack, browser: Any) -> None:
    console, tenant = console_stack, console_stack.tenant()
    ctx = browser.new_context(base_url=console.base_url)
    page = ctx.new_page()
    # Signed out, a console page sends the browser to the sign-in form and back afterwards.
    page.goto("/console/repos")
    assert "/console/sign-in" in page.url
    response = page.goto("/console/sign-in?next=//evil.example/x")
    assert response is not None
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    shot(console, page, "sign-in")
    page.get_by_label("API key").fill("lh_not_a_key")
    page.get_by_role("button", name="Sign in").click()
    assert page.get_by_role("alert").inner_text().startswith("That API key is not valid")
    # Signing a browser in takes the form's own token: a post from elsewhere sets no session.
    with httpx.Client(base_url=console.base_url, timeout=30) as raw:
        forged = raw.post("/console/sign-in", data={"api_key": tenant.key, "next": "/console/videos"})
        assert forged.status_code == 403 and "lh_console" not in forged.cookies
    page.get_by_label("API key").fill(tenant.key)
    page.get_by_role("button", name="Sign in").click()
    # The hostile next= is not followed: the console's own page instead.
    page.wait_for_url(f"{console.base_url}/console/videos")
    (cookie,) = [c for c in ctx.cookies() if c["name"] == "lh_console"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert page.evaluate("document.cookie").find("lh_console=") < 0

    # The same session cookie without the form's token, with a wrong one, or from another
    # origin: refused before anything changes.
    jar = {"lh_console": cookie["value"]}
    with httpx.Client(base_url=console.base_url, cookies=jar, timeout=30) as raw:
        form = {"prompt": "csrf probe", "model": MODEL, "size": "180x320", "seconds": "1"}
        for extra, headers in (({}, {}), ({"csrf": "0" * 64}, {}), ({}, {"Origin": "https://evil.example"})):
            answer = raw.post("/console/videos", data={**form, **extra}, headers=headers)
            assert answer.status_code == 403, answer.text
            assert "csrf" in answer.text.lower() and "Traceback" not in answer.text
        token = re.search(r'name="csrf" value="([0-9a-f]{64})"', raw.get("/console/videos").text)
        assert token is not None
        evil = raw.post(
            "/console/videos", data={**form, "csrf": token.group(1)}, headers={"Origin": "https://evil.example"}
        )
        assert evil.status_code == 403
    assert api(console, tenant).get("/v1/videos").json()["data"] == []

    # Sign-out ends the session: the next page asks to sign in again.
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/console/sign-in")
    page.goto("/console/videos")
    assert "/console/sign-in" in page.url
    ctx.close()


def test_video_submit_progress_and_player(console_stack: ConsoleStack, browser: Any) -> None:
    console, tenant = console_stack, console_stack.tenant()
    page = sign_in(browser, console, tenant)
    page.get_by_label("Prompt").fill(XSS_PROMPT)
    page.get_by_label("Model").select_option(MODEL)
    page.get_by_label("Size").select_option("180x320")
    page.get_by_label("Seconds").fill("1")
    page.get_by_label("Seed").fill("7")
    # Long enough (a few seconds here) for preview frames to come while it generates: at 40
    # steps the job could finish before the page saw its first preview event.
    page.get_by_label("Sampler steps").fill("400")
    shot(console, page, "videos")
    page.get_by_role("button", name="Generate").click()
    page.wait_for_url(re.compile(r".*/console/videos/video_[0-9a-f]+$"))
    video_id = page.url.rsplit("/", 1)[-1]
    # A live page: the status the server rendered was not yet the end, and the bar moves
    # without a reload (the EventSource stream).
    first_status = page.locator("#status").inner_text()
    assert first_status in ("queued", "in_progress"), first_status
    page.evaluate("window.__sameDocument = true")
    until(page, "document.querySelector('#progress')?.value > 0", timeout=90_000)
    shot(console, page, "video-running")
    until(page, "document.querySelector('#progress')?.value === 100", timeout=120_000)
    until(page, "document.querySelector('#status')?.textContent === 'completed'", timeout=30_000)
    assert page.evaluate("window.__sameDocument") is True
    # Preview frames were shown while it generated (fetched on the stream's video.preview events).
    assert page.evaluate("document.querySelector('#video').dataset.previewShown") == "1"
    assert page.locator("#progress-text").inner_text() == "100 %"
    # The player loads the MP4 (metadata at least) and the thumbnail is its poster.
    until(page, "document.querySelector('#player')?.readyState >= 1", timeout=30_000)
    assert page.evaluate("document.querySelector('#player')?.duration") > 0
    assert page.locator("#player-box").is_visible()
    # The hostile prompt is text on the page, and nothing of it ran.
    assert page.locator("#prompt-text").inner_text() == XSS_PROMPT
    no_script_ran(page)
    link = page.get_by_role("link", name="Workflow in Temporal Web UI").get_attribute("href")
    assert link == f"http://127.0.0.1:9/ui/namespaces/default/workflows/video-{video_id}"
    shot(console, page, "video")
    # The list shows it completed; phone width has no sideways scrolling.
    page.set_viewport_size({"width": 375, "height": 740})
    page.goto("/console/videos")
    assert page.locator(f'[data-video="{video_id}"] [data-field=status]').inner_text() == "completed"
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    no_script_ran(page)
    shot(console, page, "videos-phone")

    # A second job, cancelled from its page, then deleted.
    page.set_viewport_size({"width": 1280, "height": 800})
    page.get_by_label("Prompt").fill("to be cancelled")
    page.get_by_label("Size").select_option("180x320")
    page.get_by_label("Seconds").fill("1")
    page.get_by_label("Sampler steps").fill("1000")
    page.get_by_role("button", name="Generate").click()
    page.wait_for_url(re.compile(r".*/console/videos/video_[0-9a-f]+$"))
    cancelled_id = page.url.rsplit("/", 1)[-1]
    page.get_by_role("button", name="Cancel").click()
    until(page, "document.querySelector('#status')?.textContent === 'cancelled'", timeout=30_000)
    page.get_by_role("button", name="Delete").click()
    page.wait_for_url("**/console/videos")
    assert api(console, tenant).get(f"/v1/videos/{cancelled_id}").status_code == 404
    page.context.close()


def test_ci_run_graph_live_log_approval_and_cancel(console_stack: ConsoleStack, browser: Any) -> None:
    console, tenant = console_stack, console_stack.tenant()
    client = api(console, tenant)
    client.tenant_id = tenant.tenant_id  # type: ignore[attr-defined]

    def protect(c: httpx.Client, repo_id: str) -> None:
        answer = c.put(f"/v1/repos/{repo_id}/environments/production", json={"required_approval": True})
        assert answer.status_code == 200, answer.text

    pushed = push_workflow(console.stack, WORKFLOW, client=client, before_push=protect)
    page = sign_in(browser, console, tenant)
    page.goto("/console/repos")
    page.get_by_role("link", name=pushed.name).click()
    page.get_by_role("link", name=pushed.run_id[:16]).click()
    page.wait_for_url(f"**/console/runs/{pushed.run_id}")
    # The page reloads itself once when a job turns awaiting_approval (its buttons are rendered
    # by the server): the whole graph is checked in one evaluation, asked again across a reload.
    until(
        page,
        "[...document.querySelectorAll('svg#graph a.node')].map(n => n.dataset.job).sort().join()"
        " === 'build,deploy,lint,notify'"
        " && document.querySelectorAll('svg#graph path.edge').length === 2",
    )

    # The build job's page follows its log live: the first tick shows before the last exists.
    page.get_by_role("link", name="build").first.click()
    page.wait_for_url(f"**/runs/{pushed.run_id}/jobs/build")
    log = page.locator("#log")
    log.get_by_text("tick 1", exact=True).wait_for(timeout=90_000)
    assert log.get_by_text("tick 6", exact=True).count() == 0
    # The step list is live: the running step shows as in progress before any result exists.
    assert page.locator('#steps [data-step="1"] .badge').inner_text() == "in_progress"
    assert page.locator('#steps [data-step="2"]').count() == 0
    shot(console, page, "job-live")
    until(page, "document.querySelector('#log')?.dataset.ended === '1'", timeout=60_000)
    # At the end the server's list replaces it: each step's status, start time and duration.
    until(page, "document.querySelector('#steps')?.dataset.final === '1'", timeout=30_000)
    assert page.locator("#steps li").count() == 2
    assert page.locator('#steps [data-step="2"] .badge').inner_text() == "success"
    assert "Package" in page.locator('#steps [data-step="2"]').inner_text()
    assert " · " in page.locator('#steps [data-step="2"]').inner_text()
    # The log is folded per step, groups inside their step.
    package = log.locator('details.step[data-step="2"]')
    assert "Step 2: Package" in package.locator("summary").first.inner_text()
    assert package.get_by_text("packaged", exact=True).count() == 1
    assert log.locator('details.step[data-step="1"] details > summary', has_text="Install things").count() == 1
    # Search marks the lines holding the text (groups opened); the log downloads as text.
    page.locator("#log-search").fill("tick")
    assert page.locator("#log-hits").inner_text() == "6 matches"
    assert log.locator(".line.hit").count() == 6
    page.locator("#log-search").fill("inside the group")
    assert log.locator(".line.hit").count() == 1 and log.locator(".line.hit").is_visible()
    with page.expect_download() as download:
        page.locator("#log-download").click()
    text = Path(download.value.path()).read_text()
    assert "tick 6" in text and "packaged" in text and "[leasehold] step 2: Package" in text
    red = log.locator("span.ansi-fg-1", has_text="red alert")
    assert red.count() == 1 and "\x1b" not in log.inner_text()
    group = log.locator("details > summary", has_text="Install things")
    assert group.count() == 1
    assert log.get_by_text(XSS_LOG, exact=True).count() == 1
    first_line = log.locator("#L1 a.ln")
    assert first_line.get_attribute("href") == "#L1"
    no_script_ran(page)

    # A reconnecting stream (Last-Event-ID = the last seq seen) resumes right after it.
    jar = {c["name"]: c["value"] for c in page.context.cookies() if c["name"] == "lh_console"}
    with httpx.Client(base_url=console.base_url, cookies=jar, timeout=30) as raw:
        stream = f"/console/runs/{pushed.run_id}/jobs/build/logs/stream"
        seqs = [int(e[0]) for e in sse_events(raw, stream) if e[1] == "log" and e[0] is not None]
        assert len(seqs) >= 2 and seqs == sorted(seqs)
        resumed = sse_events(raw, stream, headers={"Last-Event-ID": str(seqs[-2])})
    assert [int(e[0]) for e in resumed if e[1] == "log" and e[0] is not None] == [seqs[-1]]
    assert resumed[-1][1] == "end"

    # Reloaded after the end: the annotation and the step summary, as text.
    page.reload()
    assert page.locator(".ann", has_text="warned").count() == 1
    assert XSS_LOG in page.locator("#summary").inner_text()
    no_script_ran(page)
    # A line link opens the page scrolled to that line, marked; following another moves the mark.
    page.goto(f"/console/runs/{pushed.run_id}")
    page.goto(f"/console/runs/{pushed.run_id}/jobs/build#L2")
    until(page, "document.querySelector('#log')?.dataset.ended === '1'", timeout=30_000)
    assert page.locator("#L2.target").count() == 1
    page.locator("#L3 a.ln").click()
    until(page, "document.querySelector('#L3')?.classList.contains('target')")
    assert page.locator(".line.target").count() == 1
    shot(console, page, "job")

    # The run page turns deploy into "awaiting approval" live; approve it and watch the run finish
    # (lint fails on purpose, so there is a job to retry).
    page.goto(f"/console/runs/{pushed.run_id}")
    page.get_by_role("button", name="Approve deploy").wait_for(timeout=60_000)
    assert page.locator('svg#graph a.node[data-job="deploy"]').get_attribute("class") == "node s-awaiting_approval"
    # The API's explanation of what the job waits for is shown with it.
    assert page.locator('#jobs [data-job="deploy"] .queue').inner_text() != ""
    shot(console, page, "run-awaiting-approval")
    page.get_by_role("button", name="Approve deploy").click()
    until(page, "document.querySelector('#run-status')?.textContent === 'failure'", timeout=90_000)
    for job_id in ("build", "deploy", "notify"):
        node = page.locator(f'svg#graph a.node[data-job="{job_id}"]')
        assert node.get_attribute("class") == "node s-success"
    assert page.locator('svg#graph a.node[data-job="lint"]').get_attribute("class") == "node s-failure"
    shot(console, page, "run")
    jobs = {j["id"]: j for j in client.get(f"/v1/runs/{pushed.run_id}").json()["jobs"]}
    assert [a["decision"] for a in jobs["deploy"]["approvals"]] == ["approved"]
    # Retry from the page: the job runs again as a new attempt.
    page.get_by_role("button", name="Retry lint").click()
    wait_for(
        "lint's second attempt",
        lambda: (
            len(
                next(j for j in client.get(f"/v1/runs/{pushed.run_id}").json()["jobs"] if j["id"] == "lint")["attempts"]
            )
            == 2
        ),
    )

    # The run listing (status, trigger, duration); then a slow run, cancelled from its page.
    page.goto(f"/console/runs?repo={pushed.repo_id}")
    row = page.locator("tbody tr", has_text=pushed.run_id[:16])
    assert "push" in row.inner_text() and row.locator(".badge").count() == 1
    shot(console, page, "runs")
    # At phone width the table and the graph scroll inside their boxes; the page does not.
    page.set_viewport_size({"width": 375, "height": 740})
    for path in (f"/console/runs?repo={pushed.repo_id}", f"/console/runs/{pushed.run_id}"):
        page.goto(path)
        assert page.evaluate("document.documentElement.scrollWidth") <= 375, path
    shot(console, page, "run-phone")
    page.set_viewport_size({"width": 1280, "height": 800})
    slow = push_workflow(console.stack, SLOW, client=client)
    page.goto(f"/console/runs/{slow.run_id}/jobs/wait")
    page.locator("#log").get_by_text("started", exact=True).wait_for(timeout=90_000)
    page.goto(f"/console/runs/{slow.run_id}")
    page.get_by_role("button", name="Cancel run").click()
    until(page, "document.querySelector('#run-status')?.textContent === 'cancelled'", timeout=60_000)
    wait_for("the run to be cancelled", lambda: client.get(f"/v1/runs/{slow.run_id}").json()["status"] == "cancelled")
    # A finished run offers "Re-run all jobs": every job runs again as the run's next attempt.
    page.reload()
    page.get_by_role("button", name="Re-run all jobs").click()
    wait_for(
        "the re-run's second attempt of wait",
        lambda: len(client.get(f"/v1/runs/{slow.run_id}/jobs/wait").json()["attempts"]) == 2,
        timeout=90,
    )
    client.post(f"/v1/runs/{slow.run_id}/cancel")
    page.context.close()


def _minute(stamp: str) -> str:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M UTC")


def test_run_number_times_matrix_graph_and_artifact(console_stack: ConsoleStack, browser: Any) -> None:
    console, tenant = console_stack, console_stack.tenant()
    client = api(console, tenant)
    client.tenant_id = tenant.tenant_id  # type: ignore[attr-defined]
    pushed = push_workflow(console.stack, MATRIX, client=client)
    rid = pushed.run_id
    run = wait_run(client, rid, timeout=90)
    assert run["status"] == "success" and run["run_number"] == 1, run
    combinations = job(run, "test")["combinations"]
    assert len(combinations) == 2, run
    # An artifact of the run as the artifact service records one (a row, then its zip in the
    # store): what the page lists and serves is the API's own listing and download.
    settings = console.stack.settings
    made, _ = start_upload(
        init_database(settings.resolved_database_url),
        tenant.tenant_id,
        pushed.repo_id,
        rid,
        "build",
        1,
        "test-report",
        utcnow() + timedelta(days=7),
    )
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w") as archive:
        archive.writestr("report.txt", "all green\n")
    open_store(settings).put(made.object_key, packed.getvalue(), "application/zip")
    finalize(init_database(settings.resolved_database_url), made.id, len(packed.getvalue()), None)

    page = sign_in(browser, console, tenant)
    # The listing: the run's number and when it was created (to the minute, UTC).
    page.goto(f"/console/runs?repo={pushed.repo_id}")
    row = page.locator("tbody tr", has_text=rid[:16])
    assert row.locator("[data-field=number]").inner_text() == "#1"
    created = row.locator("[data-field=created] time")
    assert created.inner_text() == _minute(run["created_at"])
    assert datetime.fromisoformat(created.get_attribute("datetime") or "") == datetime.fromisoformat(
        run["created_at"].replace("Z", "+00:00")
    )

    # The run page: its number, its times, and the matrix job drawn as its two combinations
    # (no empty node for the matrix job itself), each after build and before report.
    page.goto(f"/console/runs/{rid}")
    assert page.locator("#run-number").inner_text() == "#1"
    assert page.locator("#run-created").inner_text() == _minute(run["created_at"])
    drawn = page.evaluate("[...document.querySelectorAll('svg#graph a.node')].map(n => n.dataset.job)")
    assert sorted(drawn) == sorted(["build", "report", *combinations]), drawn
    assert page.locator("svg#graph path.edge").count() == 4
    shot(console, page, "run-matrix")

    # The artifact, listed with a link that downloads its zip.
    link = page.locator('#artifacts [data-artifact="test-report"] a')
    assert link.get_attribute("href") == f"/console/runs/{rid}/artifacts/{made.id}/zip"
    with page.expect_download() as download:
        link.click()
    assert download.value.suggested_filename == "test-report.zip"
    with zipfile.ZipFile(Path(download.value.path())) as archive:
        assert archive.read("report.txt") == b"all green\n"
    page.context.close()
    # Another tenant's session gets the same 404 as for a missing artifact.
    other = sign_in(browser, console, console.tenant())
    response = other.goto(f"/console/runs/{rid}/artifacts/{made.id}/zip")
    assert response is not None and response.status == 404, response and response.status
    assert "test-report" not in other.content()
    other.context.close()


def test_other_tenant_sees_404(console_stack: ConsoleStack, browser: Any) -> None:
    console = console_stack
    owner, other = console.tenant(), console.tenant()
    owner_api = api(console, owner)
    owner_api.tenant_id = owner.tenant_id  # type: ignore[attr-defined]
    video = owner_api.post(
        "/v1/videos", json={"prompt": "mine", "model": MODEL, "size": "180x320", "seconds": "1", "steps": 2}
    ).json()
    pushed = push_workflow(console.stack, SLOW.replace("sleep 120", "true"), client=owner_api)
    deadline = time.monotonic() + 60
    while owner_api.get(f"/v1/videos/{video['id']}").json()["status"] != "completed" and time.monotonic() < deadline:
        time.sleep(0.5)
    page = sign_in(browser, console, other)
    for path in (
        f"/console/videos/{video['id']}",
        f"/console/videos/{video['id']}/events",
        f"/console/videos/{video['id']}/content",
        f"/console/runs/{pushed.run_id}",
        f"/console/runs/{pushed.run_id}/events",
        f"/console/runs/{pushed.run_id}/jobs/wait",
        f"/console/runs/{pushed.run_id}/jobs/wait/logs/stream",
        f"/console/runs?repo={pushed.repo_id}",
    ):
        response = page.goto(path)
        assert response is not None and response.status == 404, (path, response and response.status)
        assert "mine" not in page.content() and "Traceback" not in page.content()
    shot(console, page, "not-found")
    # Bad input is a 400 page naming the field, never a 500.
    response = page.goto("/console/runs?commit=%3Cscript%3E")
    assert response is not None and response.status == 400 and "commit" in page.locator("main").inner_text()
    # Its own listings hold none of the owner's work.
    page.goto("/console/videos")
    assert page.locator("#video-list li").count() == 0
    page.goto("/console/runs")
    assert page.locator("tbody tr").count() == 0
    page.context.close()
