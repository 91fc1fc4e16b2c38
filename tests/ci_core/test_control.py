"""DAG parallelism, timeouts, cancel (process tree gone), retry, kill -9 of the CI worker, sandbox."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from pathlib import Path

from clients.ci import start as ci_start
from testing.harness import start_worker
from tests.ci_core.conftest import CIStack
from workflows.ci.types.job import AttemptStatus
from workflows.ci.types.run import CIRunState, JobStatus, RunStatus


def host_pids_with(marker: str) -> list[int]:
    """Host processes whose command line contains ``marker``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and "pytest" not in cmdline:
            pids.append(int(entry))
    return pids


async def wait_for(predicate, within: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.2)
    raise AssertionError("condition not met in time")


async def one_run(stack: CIStack, name: str, workflow: str, files: dict[str, str] | None = None) -> str:
    repo = stack.repo(name)
    sha = repo.commit({".github/workflows/ci.yml": workflow, **(files or {})})
    push = await stack.push(repo, sha)
    assert len(push.runs) == 1, push
    return push.runs[0].run_id


DAG = """
on: push
jobs:
  a:
    runs-on: linux
    outputs:
      start: ${{ steps.t.outputs.start }}
      end: ${{ steps.t.outputs.end }}
    steps:
      - id: t
        run: echo "start=$(date +%s%N)" >> $GITHUB_OUTPUT; sleep 2; echo "end=$(date +%s%N)" >> $GITHUB_OUTPUT
  b:
    runs-on: linux
    outputs:
      start: ${{ steps.t.outputs.start }}
      end: ${{ steps.t.outputs.end }}
    steps:
      - id: t
        run: echo "start=$(date +%s%N)" >> $GITHUB_OUTPUT; sleep 2; echo "end=$(date +%s%N)" >> $GITHUB_OUTPUT
  c:
    needs: [a, b]
    runs-on: linux
    steps:
      - id: t
        run: echo "start=$(date +%s%N)" >> $GITHUB_OUTPUT
"""


async def test_independent_jobs_overlap_and_dependents_wait(ci_stack: CIStack) -> None:
    state = await ci_stack.wait_run(await one_run(ci_stack, "dag", DAG))
    assert state.status == RunStatus.SUCCESS, state
    a, b, c = (state.job(x) for x in "abc")
    assert a and b and c
    a_start, a_end = int(a.outputs["start"]), int(a.outputs["end"])
    b_start, b_end = int(b.outputs["start"]), int(b.outputs["end"])
    # Ordering, not speed: each started before the other ended, so they ran at the same time.
    assert a_start < b_end and b_start < a_end
    assert c.started_at is not None and a.finished_at and b.finished_at
    assert c.started_at >= max(a.finished_at, b.finished_at)


TIMEOUT = """
on: push
jobs:
  slow:
    runs-on: linux
    timeout-minutes: 0.05
    steps:
      - run: echo starting; sleep 600
  after:
    needs: slow
    runs-on: linux
    steps:
      - run: echo never
"""


async def test_job_timeout_kills_the_job(ci_stack: CIStack) -> None:
    state = await ci_stack.wait_run(await one_run(ci_stack, "timeout", TIMEOUT))
    assert state.status == RunStatus.FAILURE
    slow = state.job("slow")
    assert slow is not None and slow.status == JobStatus.FAILURE
    attempt = slow.current_attempt()
    assert attempt is not None and attempt.status == AttemptStatus.TIMED_OUT
    assert "timeout-minutes" in (slow.error or "")
    assert state.job("after").status == JobStatus.SKIPPED  # type: ignore[union-attr]
    assert not host_pids_with("sleep 600")


CANCEL = """
on: push
jobs:
  long:
    runs-on: linux
    steps:
      - run: |
          sleep 987.6 &
          sh -c 'sleep 987.6' &
          echo started
          sleep 987.6
  next:
    needs: long
    runs-on: linux
    steps:
      - run: echo never
  cleanup:
    needs: long
    if: always()
    runs-on: linux
    steps:
      - run: echo "cleanup after ${{ needs.long.result }}"
"""


async def test_cancel_mid_job_kills_process_tree_and_runs_always_jobs(ci_stack: CIStack) -> None:
    run = await one_run(ci_stack, "cancel", CANCEL)
    await ci_stack.wait_run(run, until=lambda s: s.job("long").status == JobStatus.IN_PROGRESS)
    await wait_for(lambda: len(host_pids_with("sleep 987.6")) >= 3)
    await ci_start.cancel_run(ci_stack.client, run)
    state = await ci_stack.wait_run(run)
    assert state.status == RunStatus.CANCELLED and state.cancel_requested
    statuses = {j.job_id: j.status for j in state.jobs}
    assert statuses == {"long": JobStatus.CANCELLED, "next": JobStatus.CANCELLED, "cleanup": JobStatus.SUCCESS}
    assert host_pids_with("sleep 987.6") == []
    cleanup = state.job("cleanup")
    assert "cleanup after cancelled" in ci_stack.log_text(cleanup.current_attempt().log_prefix)  # type: ignore[union-attr]


RETRY = """
on: push
jobs:
  flaky:
    runs-on: linux
    steps:
      - run: echo "attempt $CI_ATTEMPT key $CI_IDEMPOTENCY_KEY"; test "$CI_ATTEMPT" -ge 2
  deploy:
    needs: flaky
    runs-on: linux
    steps:
      - run: echo "deploy with $CI_IDEMPOTENCY_KEY"
"""


async def test_retry_failed_job_reruns_it_and_dependents(ci_stack: CIStack) -> None:
    run = await one_run(ci_stack, "retry", RETRY)
    first = await ci_stack.wait_run(run)
    assert first.status == RunStatus.FAILURE
    assert first.job("deploy").status == JobStatus.SKIPPED  # type: ignore[union-attr]
    response = await ci_start.retry_job(ci_stack.client, run, "flaky")
    assert response.reset_jobs == ["flaky", "deploy"] and response.round == 1
    state = await ci_stack.wait_run(run, until=lambda s: s.status == RunStatus.SUCCESS)
    flaky = state.job("flaky")
    assert flaky is not None and flaky.attempt == 2
    assert [(a.attempt, a.status) for a in flaky.attempts] == [(1, AttemptStatus.FAILURE), (2, AttemptStatus.SUCCESS)]
    log1, log2 = (ci_stack.log_text(a.log_prefix) for a in flaky.attempts)
    assert f"attempt 1 key {run}/flaky" in log1 and f"attempt 2 key {run}/flaky" in log2
    deploy = state.job("deploy")
    assert deploy is not None and deploy.status == JobStatus.SUCCESS
    # Retrying a job that succeeded is refused.
    try:
        await ci_start.retry_job(ci_stack.client, run, "deploy")
        raise AssertionError("retry of a successful job was accepted")
    except Exception as exc:
        assert "CIJobNotRetryable" in repr(exc.__cause__) or "only failed" in str(exc.__cause__)


CHAOS = """
on: push
jobs:
  work:
    runs-on: chaos
    steps:
      - run: |
          echo "attempt $CI_ATTEMPT"
          if [ "$CI_ATTEMPT" = 1 ]; then sleep 876.5; fi
          echo done
"""


async def test_kill9_worker_mid_job_new_attempt_completes_once(ci_stack: CIStack) -> None:
    chaos = start_worker(ci_stack.settings, "ci", ci_stack.logs, "--labels", "chaos", name="ci-chaos-1").wait_healthy(
        60
    )
    try:
        run = await one_run(ci_stack, "chaos", CHAOS)
        await ci_stack.wait_run(run, until=lambda s: s.job("work").status == JobStatus.IN_PROGRESS)
        await wait_for(lambda: bool(host_pids_with("sleep 876.5")))
        chaos.kill9()
        # --die-with-parent: the orphaned sandbox dies with its worker.
        await wait_for(lambda: not host_pids_with("sleep 876.5"), within=10)
    finally:
        chaos.stop()
    chaos2 = start_worker(ci_stack.settings, "ci", ci_stack.logs, "--labels", "chaos", name="ci-chaos-2").wait_healthy(
        60
    )
    try:
        state: CIRunState = await ci_stack.wait_run(run, within=120)
    finally:
        chaos2.stop()
    assert state.status == RunStatus.SUCCESS, state
    work = state.job("work")
    assert work is not None and work.attempt == 2
    assert [(a.attempt, a.status) for a in work.attempts] == [(1, AttemptStatus.LOST), (2, AttemptStatus.SUCCESS)]
    assert "done" in ci_stack.log_text(work.attempts[1].log_prefix)
    assert "done" not in ci_stack.log_text(work.attempts[0].log_prefix)


SANDBOX = """
on: push
env:
  SECRET_PATH: {secret}
  PORT: "{port}"
jobs:
  probe:
    runs-on: linux
    steps:
      - name: probe the sandbox
        run: |
          if cat "$SECRET_PATH" 2>/dev/null; then echo READ_HOST_FILE; fi
          if ls /root /work /tmp/pytest-of-root 2>/dev/null | grep -q .; then echo SAW_HOST_DIRS; fi
          if (echo hi > /dev/tcp/127.0.0.1/$PORT) 2>/dev/null; then echo CONNECTED; else echo NO_CONNECTION; fi
          env | sort
          echo "whoami=$(id -u)"
          touch /usr/should-fail 2>/dev/null && echo WROTE_SYSTEM || echo SYSTEM_READ_ONLY
          echo ok > "$GITHUB_WORKSPACE/written"; cat "$GITHUB_WORKSPACE/written"
"""


async def test_sandbox_isolates_host_files_network_and_environment(ci_stack: CIStack, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("TOP-SECRET-CONTENT\n")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept())
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        run = await one_run(ci_stack, "sandbox", SANDBOX.format(secret=secret, port=port))
        state = await ci_stack.wait_run(run)
    finally:
        stop.set()
        thread.join(5)
        listener.close()
    assert state.status == RunStatus.SUCCESS, state
    text = ci_stack.log_text(state.job("probe").current_attempt().log_prefix)  # type: ignore[union-attr]
    assert "NO_CONNECTION" in text and "CONNECTED\n" not in text.replace("NO_CONNECTION", "")
    assert accepted == []
    assert "TOP-SECRET-CONTENT" not in text and "READ_HOST_FILE" not in text and "SAW_HOST_DIRS" not in text
    assert "SYSTEM_READ_ONLY" in text and "whoami=0" not in text and "whoami=" in text
    # The worker's environment (Temporal address, data dir, queue prefix) is not visible.
    assert "LEASEHOLD_" not in text and ci_stack.settings.queue_prefix not in text
    assert f"CI_IDEMPOTENCY_KEY={run}/probe" in text and "GITHUB_WORKSPACE=/ci/work" in text
