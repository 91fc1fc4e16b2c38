"""Many hosts on one machine (issue 32): each "host" is a loopback address of its own.

* 127.0.0.1, the shared services: the Temporal dev server, Postgres (a fresh database), moto's
  S3 server, haproxy in front of the two API replicas, and the TCP proxies that are host B's
  network.
* 127.0.0.2 (A) and 127.0.0.3 (B): an API replica, an orchestration worker and a CI worker each.
  Every connection B makes (Temporal, Postgres, S3, the API through the load balancer) and the
  one it takes (the load balancer to its API) goes through a proxy, so B can be cut off.
* 127.0.0.4 (C): GPU capacity only. 127.0.0.5: the fleet controller, which keeps one reserved
  and two preemptible GPU workers, started on hosts A, B, C (``testing.many_hosts.HostedProvider``).

Under a mixed load through the load balancer (video jobs with idempotency keys, CI pushes of
two parallel jobs, status reads), two faults, each once host A or B is running a CI job and a
video generation: every process of host A is killed (``kill -9``) and A's API, orchestration
and CI worker start again once the controller has replaced its GPU worker elsewhere; then B is
cut off for ``LEASEHOLD_CHAOS_CUT_SECONDS`` (default 15 s, three video and CI heartbeat
timeouts) and restored.

What must hold: every accepted video completes exactly once (the checker); every push made
one run and every run succeeded, each job with exactly one successful attempt (the others
``lost``), whose log reads back with contiguous sequence numbers, no gap and every line; the
faults hit work (a CI attempt of each faulted host was lost, a generation was retried); the
controller started a reserved GPU worker to replace the killed one, on another host, and three
GPU workers run again; no answer was a 5xx other than 503 with ``Retry-After``; and, once the
stack stops, no process of any host is left.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import secrets
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from sqlalchemy import make_url
from temporalio.api.enums.v1 import PendingActivityState, TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.testing import WorkflowEnvironment

from leasehold.database import init_database
from leasehold.devserver import free_port
from leasehold.records.api_keys import create_key
from leasehold.settings import Settings
from leasehold.storage import open_store
from leasehold.temporal import connect
from testing.checker import History, Observation, check
from testing.harness import ManagedProcess, lasting_port, process_env, stop_together, unique_prefix
from testing.many_hosts import (
    HOST_VARIABLE,
    fleet_process,
    fresh_database,
    haproxy_available,
    haproxy_process,
    host_pids,
    kill_host,
    mark_down,
)
from testing.stack import (
    CHECKPOINT_INTERVAL,
    cmdline,
    observe_videos,
    seeded,
    wait_until,
)
from tests.chaos.clients import (
    Answers,
    git,
    listed_videos,
    log_pages,
    read_statuses,
    submit_videos,
    until_ok,
    wait_settled,
)
from tests.conftest import in_ci, postgres_base_url
from tests.faults import TcpProxy
from tests.s3_server import moto_s3
from workflows.fleet.controller import FleetWorkflow, fleet_workflow_id
from workflows.queues import video_queue
from workflows.video.ids import workflow_id

# Starting about a dozen processes on two shared cores takes most of a minute by itself.
# ``alone``: nine hosts' processes at once starve the packages running beside it on two cores
# (the suite took twice as long, and timing-bound tests elsewhere failed); `make test` runs
# it after the parallel part.
pytestmark = [pytest.mark.chaos, pytest.mark.alone, pytest.mark.timeout(480)]

log = logging.getLogger("chaos")

INFRA, HOST_A, HOST_B, HOST_C, CONTROL = "127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"
GPU_HOSTS = (HOST_A, HOST_B, HOST_C)
# Longer than the other chaos stacks' 3 s: a dozen processes share two cores here (and host B's
# traffic is pumped by this test's own threads), and at 3 s healthy attempts were declared lost
# while host A's processes started again. Lost attempts are allowed, but each one costs time.
HEARTBEAT_TIMEOUT = 5.0
CUT_SECONDS = float(os.environ.get("LEASEHOLD_CHAOS_CUT_SECONDS", "15"))
BUCKET = "leasehold-many-hosts"
MODEL = "procedural-v1"
RESERVED = f"{MODEL}@reserved"  # the fleet controller's pool key
FLEET_SPEC = {
    "pools": [
        {"model": MODEL, "capacity_type": "reserved", "min_workers": 1, "max_workers": 1},
        {"model": MODEL, "capacity_type": "preemptible", "min_workers": 2, "max_workers": 2, "gpu_hour_cost": 0.4},
    ],
    "tick_seconds": 1.0,
}
VIDEOS_PER_WAVE = 3
PUSHES_PER_WAVE = 2
EXTRA_VIDEOS = 3  # at most, when the other hosts took a wave's videos (see ``wave``)
EXTRA_PUSHES = 3  # at most, when the other hosts took a wave's jobs (see ``wave``)
LINES = 20  # one line per 0.5 s: a job runs about ten seconds, across the fault
JOBS = ("build", "test")
CI_WORKFLOW = "on: push\njobs:\n" + "".join(
    f"  {job}:\n    runs-on: linux\n    steps:\n"
    f'      - run: for i in $(seq 1 {LINES}); do echo "{job} $i"; sleep 0.5; done\n'
    for job in JOBS
)
# Each CI worker takes its job uids from its own part of this session's range, as separate
# hosts' workers would (their uid pools live in their own data dirs).
UID_SPAN = 8192
HEALTHY_WITHIN = 180.0


@dataclass
class HostLink:
    """Host B's network: a proxy for every connection it makes or takes, cut and restored together."""

    proxies: dict[str, TcpProxy]

    def cut(self) -> None:
        for proxy in self.proxies.values():
            proxy.cut()

    def restore(self) -> None:
        for proxy in self.proxies.values():
            proxy.restore()

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.proxies[name].port}"


@dataclass
class ManyHosts:
    """The running stack: settings per host, its processes, the load balancer's URL."""

    root: Path
    lb_url: str
    settings: dict[str, Settings]
    link_b: HostLink
    processes: dict[str, ManagedProcess] = field(default_factory=dict)

    def start(self, process: ManagedProcess) -> ManagedProcess:
        self.processes[process.name] = process.start()
        return process

    def host_process(self, host: str, role: str) -> ManagedProcess:
        """``api``, ``orchestration`` or ``ci`` of host A or B (not started)."""
        config = self.settings[host]
        tag = "a" if host == HOST_A else "b"
        if role == "api":
            argv = [sys.executable, "-m", "cli.main", "api"]
            env = process_env(config, **{HOST_VARIABLE: host})
            url = f"http://{host}:{config.api_port}/healthz"
        else:
            args = ["--labels", "linux"] if role == "ci" else []
            argv = [sys.executable, "-m", "cli.main", "worker", role, *args]
            port = free_port()
            env = process_env(config, LEASEHOLD_METRICS_PORT=str(port), **{HOST_VARIABLE: host})
            url = f"http://{host}:{port}/healthz"
        return ManagedProcess(f"{role}-{tag}", argv, env, self.root / "logs" / f"{role}-{tag}.log", url)

    def start_host(self, host: str) -> list[ManagedProcess]:
        return [self.start(self.host_process(host, role)) for role in ("api", "orchestration", "ci")]

    def of_host(self, host: str) -> list[ManagedProcess]:
        tag = "-a" if host == HOST_A else "-b"
        return [p for name, p in self.processes.items() if name.endswith(tag)]

    def control(self) -> Settings:
        return self.settings[CONTROL]

    @property
    def down_dir(self) -> Path:
        """Where a host is marked down for the fleet's provider (``fleet_process`` puts it here)."""
        return self.root / "down"


def settings_for(host: str, root: Path, common: dict[str, Any], routes: dict[str, str]) -> Settings:
    return Settings(
        data_dir=root / "hosts" / host / "data",
        api_host=host,
        metrics_host=host,
        temporal_address=routes["temporal"],
        database_url=routes["database"],
        s3_endpoint_url=routes["store"],
        api_internal_url=routes["lb"],
        **common,
    )


@contextmanager
def running_many_hosts(temporal_address: str, root: Path, database: str) -> Iterator[ManyHosts]:
    with ExitStack() as exits:
        store = exits.enter_context(moto_s3(root / "moto.log"))
        boto3.client(
            "s3", endpoint_url=store, region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
        ).create_bucket(Bucket=BUCKET)
        init_database(database)
        lb_port = lasting_port()
        lb_url = f"http://{INFRA}:{lb_port}"
        api_ports = {HOST_A: lasting_port(), HOST_B: lasting_port()}
        db_url = make_url(database)
        temporal_host, temporal_port = temporal_address.rsplit(":", 1)
        proxies = {
            "temporal": TcpProxy(temporal_host, int(temporal_port)),
            "database": TcpProxy(str(db_url.host), int(db_url.port or 5432)),
            "store": TcpProxy(INFRA, int(store.rsplit(":", 1)[1])),
            "lb": TcpProxy(INFRA, lb_port),
            "api": TcpProxy(HOST_B, api_ports[HOST_B]),
        }
        link_b = HostLink(proxies)
        exits.callback(link_b.close)
        uid_base = Settings().ci_sandbox_uid_base
        common: dict[str, Any] = {
            "queue_prefix": unique_prefix(),
            "public_base_url": lb_url,
            "checkpoint_interval_seconds": CHECKPOINT_INTERVAL,
            "video_heartbeat_timeout_seconds": HEARTBEAT_TIMEOUT,
            "ci_heartbeat_timeout_seconds": HEARTBEAT_TIMEOUT,
            "ci_cancel_grace_seconds": 1.0,
            "ci_log_flush_seconds": 0.3,
            "ci_max_concurrent_jobs": 2,
            "ci_local_repo_root": root,
            "video_paid_max_queued": 1000,
            # Paid jobs wait this long for the reserved worker before preemptible capacity takes them.
            "video_capacity_types": True,
            "video_capacity_fallback_seconds": 2.0,
            "video_capacity_refresh_seconds": 1.0,
            # About half a second per step of the small job: a job runs across a fault.
            "video_step_pace_seconds_per_frame_megapixel": 1.0,
            "store_backend": "s3",
            "s3_bucket": BUCKET,
            "s3_access_key_id": "k",
            "s3_secret_access_key": "s",
            # One deployment: every host signs and seals with the same keys.
            "url_signing_key": secrets.token_hex(32),
            "secrets_keys": f"k1:{base64.b64encode(os.urandom(32)).decode()}",
            # Schedules are not under test; they would only add load.
            "lifecycle_schedules": False,
        }
        direct = {"temporal": temporal_address, "database": database, "store": store, "lb": lb_url}
        through_b = {
            "temporal": link_b.address("temporal"),
            "database": db_url.set(host="127.0.0.1", port=proxies["database"].port).render_as_string(False),
            "store": proxies["store"].url,
            "lb": proxies["lb"].url,
        }
        settings = {
            HOST_A: settings_for(HOST_A, root, {**common, "api_port": api_ports[HOST_A]}, direct),
            HOST_B: settings_for(HOST_B, root, {**common, "api_port": api_ports[HOST_B]}, through_b),
            HOST_C: settings_for(HOST_C, root, common, direct),
            CONTROL: settings_for(CONTROL, root, common, direct),
        }
        for host, offset in ((HOST_A, 0), (HOST_B, UID_SPAN)):
            settings[host] = settings[host].model_copy(
                update={"ci_sandbox_uid_base": uid_base + offset, "ci_sandbox_uid_count": 4096}
            )
        (root / "logs").mkdir(parents=True, exist_ok=True)
        stack = ManyHosts(root, lb_url, settings, link_b)
        exits.callback(lambda: stop_together(stack.processes.values(), timeout=90))
        stack.start(
            haproxy_process(
                root, (INFRA, lb_port), {"a": (HOST_A, api_ports[HOST_A]), "b": (INFRA, proxies["api"].port)}
            )
        )
        for host in (HOST_A, HOST_B):
            stack.start_host(host)
        config = root / "fleet.json"
        config.write_text(json.dumps(FLEET_SPEC))
        fleet_port = free_port(CONTROL)
        gpu_envs = {host: process_env(settings[host], **{HOST_VARIABLE: host}) for host in GPU_HOSTS}
        stack.start(
            fleet_process(
                "fleet",
                process_env(settings[CONTROL], LEASEHOLD_METRICS_PORT=str(fleet_port), **{HOST_VARIABLE: CONTROL}),
                config,
                gpu_envs,
                root,
                f"http://{CONTROL}:{fleet_port}/healthz",
            )
        )
        for process in list(stack.processes.values()):
            process.wait_healthy(HEALTHY_WITHIN)
        yield stack


@pytest.fixture
def database_url() -> Iterator[str]:
    """A fresh database on the Postgres at 127.0.0.1:5432 (dropped afterwards)."""
    base = postgres_base_url()
    if base is None:
        if in_ci():
            pytest.fail("Postgres on 127.0.0.1:5432 (database 'test') is required under CI=true")
        pytest.skip("no Postgres on 127.0.0.1:5432")
    with fresh_database(base) as fresh:
        yield fresh


@pytest.fixture
def many_hosts(temporal_env: WorkflowEnvironment, database_url: str, tmp_path: Path) -> Iterator[ManyHosts]:
    if not haproxy_available():
        if in_ci():
            pytest.fail("haproxy (/usr/sbin/haproxy) is required under CI=true")
        pytest.skip("haproxy is not installed")
    address = temporal_env.client.service_client.config.target_host
    with running_many_hosts(address, tmp_path, database_url) as stack:
        yield stack
    # Every process of every host is gone once the stack stopped.
    left = {host: kill_host(host) for host in (*GPU_HOSTS, CONTROL)}
    assert not any(left.values()), f"processes left after the stack stopped: {left}"


# What the test reads ----------------------------------------------------------------------


def gpu_workers() -> list[tuple[int, str, str]]:
    """Live GPU workers of every host: (pid, host, capacity type)."""
    found = []
    for host in GPU_HOSTS:
        for pid in host_pids(host):
            argv = cmdline(pid).split()
            if "worker" in argv and "gpu" in argv and "--capacity-type" in argv:
                found.append((pid, host, argv[argv.index("--capacity-type") + 1]))
    return found


def fleet_started_after(stack: ManyHosts, pool: str, since: datetime) -> int:
    async def query() -> int:
        client = await connect(stack.control())
        handle = client.get_workflow_handle(fleet_workflow_id(stack.control().queue_prefix))
        state = await handle.query(FleetWorkflow.state)
        return sum(d.started.get(pool, 0) for d in state.decisions if d.at >= since)

    return asyncio.run(query())


def polling(stack: ManyHosts, capacity_type: str, pid: int) -> bool:
    """Whether the GPU worker ``pid`` has polled its capacity type's queue (it serves)."""

    async def describe() -> bool:
        client = await connect(stack.control())
        request = DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(
                name=video_queue(MODEL, stack.control().queue_prefix, None, capacity_type),
                kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL,
            ),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
            report_pollers=True,
        )
        desc = await client.workflow_service.describe_task_queue(request)
        return any(f"-{pid}@" in poller.identity for poller in desc.pollers)

    return asyncio.run(describe())


def generating_on(stack: ManyHosts, job_ids: list[str], pids: set[int]) -> bool:
    """Whether one of ``job_ids`` is being generated by a GPU worker among ``pids``."""

    async def describe() -> bool:
        client = await connect(stack.control())
        for job_id in job_ids:
            try:
                desc = await client.get_workflow_handle(workflow_id(job_id)).describe()
            except Exception:  # not started yet: look again later
                continue
            for pending in desc.raw_description.pending_activities:
                if pending.state != PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
                    continue
                if any(f"-{pid}@" in pending.last_worker_identity for pid in pids):
                    return True
        return False

    return asyncio.run(describe())


def ci_running_on(http: httpx.Client, answers: Answers, run_ids: list[str], pid: int) -> bool:
    for run_id in run_ids:
        for job in until_ok(http, "GET", f"/v1/runs/{run_id}", answers)["jobs"]:
            if any(a["status"] == "running" and a["worker"].endswith(f"-{pid}") for a in job["attempts"]):
                return True
    return False


def read_whole_log(http: httpx.Client, answers: Answers, run_id: str, job_id: str) -> tuple[list[int], list[str], Any]:
    """The final attempt's chunk sequence numbers, its lines, and its last page."""
    seqs: list[int] = []
    lines: list[str] = []
    page: Any = None
    for page in log_pages(http, answers, run_id, job_id):
        assert page["gaps"] == [], f"{run_id} {job_id}: log gaps {page['gaps']}"
        for chunk in page["chunks"]:
            seqs.append(chunk["seq"])
            lines.extend(chunk["text"].splitlines())
    return seqs, lines, page


# The scenario -----------------------------------------------------------------------------


def push_wave(
    http: httpx.Client, answers: Answers, history: History, repo: Path, repo_id: str, wave: int, numbers: range
) -> tuple[list[str], dict[str, str]]:
    """Commits ``numbers`` of ``wave`` pushed through the load balancer: their run ids and sha -> key."""
    run_ids: list[str] = []
    keys: dict[str, str] = {}
    for n in numbers:
        (repo / "n.txt").write_text(f"{wave}.{n}")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"w{wave}c{n}")
        sha = git(repo, "rev-parse", "HEAD")
        key = f"push-{wave}-{n}"
        keys[sha] = key
        history.invoke(key, "ci")
        push = until_ok(
            http,
            "POST",
            "/v1/hooks/push",
            answers,
            json={"repo_id": repo_id, "commit_sha": sha, "ref": "refs/heads/main"},
        )
        runs: list[dict[str, Any]] = []
        for _ in range(300):
            runs = until_ok(http, "GET", f"/v1/pushes/{push['id']}", answers).get("runs") or []
            if runs:
                break
            time.sleep(0.2)
        assert len(runs) == 1, f"push {sha}: runs {runs}"
        history.ok(key, "ci", runs[0]["run_id"])
        run_ids.append(runs[0]["run_id"])
    return run_ids, keys


def acknowledged_ids(history: History, keys: list[str]) -> list[str]:
    acked = history.acknowledged()
    return [acked[k] for k in keys if k in acked]


def test_kill_a_host_and_cut_another_off_loses_and_duplicates_nothing(
    many_hosts: ManyHosts, chaos_seed: int, tmp_path: Path
) -> None:
    stack = many_hosts
    rng = seeded(chaos_seed, "many-hosts")
    answers = Answers()
    history = History(tmp_path / "history.jsonl")
    key = create_key(init_database(stack.control().resolved_database_url), "t-many", "chaos", "paid")
    http = answers.client(stack.lb_url, key)

    wait_until(
        lambda: sorted(c for _p, _h, c in gpu_workers()) == ["preemptible", "preemptible", "reserved"],
        60,
        "3 GPU workers",
    )
    initial = gpu_workers()
    assert {(h, c) for _p, h, c in initial} == {(HOST_A, "reserved"), (HOST_B, "preemptible"), (HOST_C, "preemptible")}

    def capacity() -> dict[str, int]:
        (entry,) = [m for m in until_ok(http, "GET", "/v1/capacity", answers)["data"] if m["model"] == MODEL]
        return dict(entry["workers_by_capacity"])

    wait_until(lambda: capacity() == {"reserved": 1, "preemptible": 2}, 120, "every GPU worker polling", 0.5)

    repo = tmp_path / "repo"
    (repo / ".github" / "workflows").mkdir(parents=True)
    (repo / ".github" / "workflows" / "ci.yml").write_text(CI_WORKFLOW)
    git(repo, "init", "-q", "-b", "main")
    created = until_ok(
        http, "POST", "/v1/repos", answers,
        json={"name": f"chaos/many{chaos_seed}", "clone_url": str(repo), "webhook_secret": "many-hosts-secret"},
    )  # fmt: skip
    repo_id = created["id"]
    stop_reading = threading.Event()
    reader = threading.Thread(target=read_statuses, args=(http, answers, repo_id, stop_reading), daemon=True)
    reader.start()
    video_keys = [f"many-{chaos_seed}-{i}" for i in range(2 * VIDEOS_PER_WAVE)]
    run_ids: list[str] = []
    sha_keys: dict[str, str] = {}
    submitters: list[threading.Thread] = []

    def wave(n: int, host: str) -> None:
        """Pushes and videos, until the host runs a CI job and generates a video."""
        keys = video_keys[n * VIDEOS_PER_WAVE : (n + 1) * VIDEOS_PER_WAVE]
        submitter = threading.Thread(target=submit_videos, args=(http, history, answers, list(keys), 1.0), daemon=True)
        submitter.start()
        submitters.append(submitter)
        (ci,) = [p for p in stack.of_host(host) if p.name.startswith("ci-")]
        gpus = {pid for pid, h, _c in gpu_workers() if h == host}
        ids, shas = push_wave(http, answers, history, repo, repo_id, n, range(PUSHES_PER_WAVE))
        run_ids.extend(ids)
        sha_keys.update(shas)
        # The fault must find this host running a CI job and generating a video at once, but the
        # other hosts' free slots and GPU workers may take all of a wave's work: every 20 s
        # without both, one more push or video goes in for what is missing (a few at most).
        pushes, extras = PUSHES_PER_WAVE, 0
        deadline = time.monotonic() + 20
        while True:
            ci_here = ci_running_on(http, answers, ids, ci.pid)
            video_here = generating_on(stack, acknowledged_ids(history, keys), gpus)
            if ci_here and video_here:
                break
            if time.monotonic() >= deadline:
                assert extras < EXTRA_PUSHES + EXTRA_VIDEOS, f"{host}: CI job {ci_here}, video {video_here}"
                extras += 1
                deadline = time.monotonic() + 20
                if not ci_here:
                    pushed, shas = push_wave(http, answers, history, repo, repo_id, n, range(pushes, pushes + 1))
                    pushes += 1
                    ids.extend(pushed)
                    run_ids.extend(pushed)
                    sha_keys.update(shas)
                if not video_here:
                    key = f"many-{chaos_seed}-{n}-extra-{extras}"
                    video_keys.append(key)
                    keys.append(key)
                    submit_videos(http, history, answers, [key], 0.0)
            time.sleep(0.5)
        time.sleep(rng.uniform(0.5, 2.0))

    # Fault 1: host A loses power.
    wave(0, HOST_A)
    killed_at = datetime.now(UTC)
    killed_ci = stack.processes["ci-a"].pid
    mark_down(stack.down_dir, HOST_A, True)
    killed = kill_host(HOST_A)
    log.warning("seed=%d: killed host A (%d processes)", chaos_seed, len(killed))
    for process in stack.of_host(HOST_A):
        assert process.pid in killed, f"{process.name} was not among host A's processes"
        assert process.proc is not None
        process.proc.wait(timeout=10)
    assert any(pid in killed for pid, h, _c in initial if h == HOST_A), "host A's GPU worker was not killed"

    # The controller replaces the reserved worker, on another host.
    wait_until(lambda: fleet_started_after(stack, RESERVED, killed_at) >= 1, 60, "the controller's replacement", 0.5)
    wait_until(lambda: len(gpu_workers()) == 3, 60, "three GPU workers again")
    replaced = gpu_workers()
    assert all(h != HOST_A for _p, h, _c in replaced), replaced
    assert sorted(c for _p, _h, c in replaced) == ["preemptible", "preemptible", "reserved"], replaced
    (new_reserved,) = [p for p, _h, c in replaced if c == "reserved"]
    wait_until(lambda: polling(stack, "reserved", new_reserved), 120, "the replacement serving", 0.5)
    log.warning("GPU workers after the kill: %s", replaced)

    # Host A comes back (its API, orchestration and CI worker; its GPU capacity was replaced).
    for process in stack.start_host(HOST_A):
        process.wait_healthy(HEALTHY_WITHIN)
    mark_down(stack.down_dir, HOST_A, False)

    # Fault 2: host B is cut off for longer than the heartbeat timeouts, then restored.
    wave(1, HOST_B)
    stack.link_b.cut()
    log.warning("seed=%d: host B cut off for %.0f s", chaos_seed, CUT_SECONDS)
    time.sleep(CUT_SECONDS)
    stack.link_b.restore()
    log.warning(
        "host B restored; %d connections refused meanwhile", sum(p.refused for p in stack.link_b.proxies.values())
    )

    for submitter in submitters:
        submitter.join(timeout=180)
        assert not submitter.is_alive(), "the submits did not end"

    wait_settled(http, answers, run_ids, 240, video_interval=1.0)
    stop_reading.set()
    reader.join(timeout=60)

    # Every accepted video completed, exactly once; the kill and the cut retried generations.
    listed = listed_videos(http, answers)
    observations, _ = asyncio.run(_observe(stack, listed))
    report = check(history.restricted(video_keys), observations)
    assert report.ok, f"seed={chaos_seed}\n{report.summary()}"
    assert len(history.acknowledged().keys() & set(video_keys)) == len(video_keys), history.acknowledged()
    attempts = asyncio.run(_result_attempts(stack, [v["id"] for v in listed]))
    assert max(attempts) > 1, f"no generation was retried: the faults hit no video ({attempts})"

    # Every push made one run, and each run succeeded.
    summaries = until_ok(http, "GET", "/v1/runs", answers, params={"repo": repo_id, "limit": 100})["data"]
    ci_observations = [
        Observation(r["id"], sha_keys.get(r["commit_sha"]), "completed" if r["status"] == "success" else r["status"])
        for r in summaries
    ]
    ci_report = check(history.restricted(sha_keys.values()), ci_observations, results_per_job=None)
    assert ci_report.ok, f"seed={chaos_seed}\n{ci_report.summary()}"

    # Each job: one successful attempt (the others lost), its whole log, contiguous, no gap.
    lost_on: set[str] = set()
    for run_id in run_ids:
        run = until_ok(http, "GET", f"/v1/runs/{run_id}", answers)
        assert run["status"] == "success", run
        for job in run["jobs"]:
            statuses = [a["status"] for a in job["attempts"]]
            log.warning(
                "%s %s: %s",
                run_id,
                job["id"],
                [(a["attempt"], a["status"], a["worker"], a["error"]) for a in job["attempts"]],
            )
            assert statuses.count("success") == 1 and set(statuses) <= {"success", "lost"}, (
                f"seed={chaos_seed} {run_id} {job['id']}: attempts {statuses}"
            )
            # One fault costs a job one attempt: the next attempt's request for a grant
            # heartbeats while the run's new orchestration worker takes over, so the healthy
            # attempt is not declared lost too.
            assert statuses.count("lost") <= 1, f"seed={chaos_seed} {run_id} {job['id']}: attempts {statuses}"
            (winner,) = [a for a in job["attempts"] if a["status"] == "success"]
            assert job["attempt"] == winner["attempt"], job
            for attempt in job["attempts"]:
                if attempt["status"] == "lost":
                    lost_on.add(attempt["worker"])
            seqs, lines, last = read_whole_log(http, answers, run_id, job["id"])
            assert last["ended"] and last["attempt"] == winner["attempt"], last
            assert seqs == list(range(len(seqs))) and seqs, f"{run_id} {job['id']}: chunk seqs {seqs}"
            printed = [line for line in lines if line.startswith(f"{job['id']} ")]
            assert printed == [f"{job['id']} {i}" for i in range(1, LINES + 1)], lines
    for host, pid in ((HOST_A, killed_ci), (HOST_B, stack.processes["ci-b"].pid)):
        assert any(w.endswith(f"-{pid}") for w in lost_on), f"the faults lost no CI attempt on {host}: {lost_on}"

    # No answer but successes, client errors and 503 with Retry-After.
    assert answers.wrong == [], "\n".join(answers.wrong[:20])
    log.warning("answers: %s; GPU capacity at the end: %s", dict(sorted(answers.statuses.items())), capacity())


async def _observe(stack: ManyHosts, listed: list[dict[str, Any]]) -> tuple[list[Observation], Any]:
    return await observe_videos(await connect(stack.control()), open_store(stack.control()), listed)


async def _result_attempts(stack: ManyHosts, job_ids: list[str]) -> list[int]:
    from workflows.video.job import VideoJobWorkflow

    client = await connect(stack.control())
    attempts = []
    for job_id in job_ids:
        state = await client.get_workflow_handle_for(VideoJobWorkflow.run, workflow_id(job_id)).query(
            VideoJobWorkflow.state
        )
        attempts.append(state.result.attempt if state.result else 0)
    return attempts
