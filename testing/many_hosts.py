"""Many "hosts" on one machine, for the many-host fault test (issue 32).

Linux routes all of 127.0.0.0/8 to the loopback interface, so each host of a test stack is a
loopback address of its own (127.0.0.2, 127.0.0.3, ...): its processes bind that address
(``LEASEHOLD_API_HOST``, ``LEASEHOLD_METRICS_HOST``) and carry it in ``MANY_HOSTS_HOST``, which
is how :func:`host_pids` finds every process of a host, children included, to kill them all.

Here also: the load balancer in front of the API replicas (haproxy), a fresh Postgres
database per run, and :class:`HostedProvider`, the fleet controller's stand-in for a cloud:
it starts each GPU worker on the least loaded host that is up (a host is down while a marker
file names it), so the controller's replacement for a worker lost with its host lands on
another one. Run it as ``python -m testing.many_hosts fleet --config SPEC --hosts HOSTS
--down-dir DIR``: the ``leasehold fleet run`` process with this provider instead of the local one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from orchestrator.fleet.local import LocalProcessProvider
from testing.harness import ManagedProcess
from testing.stack import children_of, process_env_var
from workflows.fleet.types import FleetPool

log = logging.getLogger(__name__)

# The variable that names a process's host; inherited by everything the process starts.
HOST_VARIABLE = "MANY_HOSTS_HOST"
HAPROXY = "/usr/sbin/haproxy"
# What the load balancer answers for itself (its own health, not the replicas').
LB_HEALTH_PATH = "/lb-health"


# Processes of a host -----------------------------------------------------------------------


def host_pids(address: str) -> list[int]:
    """Every live process of the host ``address``: those whose environment names it, and all
    their descendants (a CI job's sandbox may clear its environment)."""
    tagged = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and process_env_var(int(entry), HOST_VARIABLE) == address:
            tagged.append(int(entry))
    found: list[int] = []
    queue = list(tagged)
    while queue and len(found) < 2000:
        pid = queue.pop()
        if pid not in found:
            found.append(pid)
            queue.extend(children_of(pid))
    return found


def kill_host(address: str) -> list[int]:
    """``kill -9`` every process of the host at once, as a machine that loses power; the pids."""
    pids = host_pids(address)
    # Stopped first, so none of them sees another die and reacts before its own end.
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    return pids


def mark_down(down_dir: Path, address: str, down: bool) -> None:
    """Tell the provider the host is down (no worker is placed there) or up again."""
    marker = down_dir / address
    if down:
        down_dir.mkdir(parents=True, exist_ok=True)
        marker.touch()
    else:
        marker.unlink(missing_ok=True)


# The fleet controller's provider -----------------------------------------------------------


class HostedProvider:
    """GPU workers spread over hosts: one ``LocalProcessProvider`` per host, each starting its
    workers with that host's environment (its address, and the routes its traffic takes)."""

    def __init__(self, hosts: dict[str, dict[str, str]], logs: Path, down_dir: Path) -> None:
        self.hosts = {address: LocalProcessProvider(logs / address, env) for address, env in hosts.items()}
        self.down_dir = down_dir
        self._pools: dict[str, FleetPool] = {}

    def _up(self, address: str) -> bool:
        return not (self.down_dir / address).exists()

    def _load(self, address: str) -> int:
        return sum(self.hosts[address].running(pool) for pool in self._pools.values())

    def running(self, pool: FleetPool) -> int:
        self._pools[pool.key] = pool
        return sum(provider.running(pool) for provider in self.hosts.values())

    def start(self, pool: FleetPool, count: int) -> int:
        self._pools[pool.key] = pool
        started = 0
        order = list(self.hosts)
        for _ in range(count):
            up = [address for address in order if self._up(address)]
            if not up:
                log.warning("fleet: no host is up for a %s worker", pool.key)
                break
            address = min(up, key=lambda a: (self._load(a), order.index(a)))
            started += self.hosts[address].start(pool, 1)
            log.info("fleet: placed a %s worker on host %s", pool.key, address)
        return started

    def retire(self, pool: FleetPool, count: int, idle: list[str], beat: Callable[[], None]) -> list[str]:
        retired: list[str] = []
        for _ in range(count):
            address = max(self.hosts, key=lambda a: self.hosts[a].running(pool))
            if self.hosts[address].running(pool) == 0:
                break
            retired += self.hosts[address].retire(pool, 1, idle, beat)
        return retired

    def close(self) -> None:
        for provider in self.hosts.values():
            provider.close()


def fleet_process(
    name: str, env: dict[str, str], config: Path, hosts: dict[str, dict[str, str]], root: Path, health_url: str
) -> ManagedProcess:
    """The fleet controller's process (not started) with a :class:`HostedProvider` over ``hosts``
    (address -> the environment its workers run with); its files live under ``root``."""
    hosts_file = root / "fleet-hosts.json"
    hosts_file.write_text(json.dumps(hosts))
    argv = [sys.executable, "-m", "testing.many_hosts", "fleet", "--config", str(config)]
    argv += ["--hosts", str(hosts_file), "--down-dir", str(root / "down"), "--logs", str(root / "logs" / "fleet")]
    return ManagedProcess(name, argv, env, root / "logs" / f"{name}.log", health_url)


def _run_fleet(args: argparse.Namespace) -> int:
    from leasehold.settings import Settings
    from orchestrator.fleet.runner import load_spec, run_fleet

    settings = Settings()
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    hosts = json.loads(Path(args.hosts).read_text())
    provider = HostedProvider(hosts, Path(args.logs), Path(args.down_dir))
    run_fleet(settings, load_spec(Path(args.config)), provider)
    return 0


# The load balancer -------------------------------------------------------------------------


def haproxy_config(listen: tuple[str, int], servers: dict[str, tuple[str, int]]) -> str:
    """haproxy in front of API replicas: health-checked on ``/healthz`` (Temporal and the
    database answer), a request the chosen replica refused or dropped without an answer tried
    on another (every write the tests make is idempotent: keys, webhooks), and its own 503
    with ``Retry-After``, as the replicas' own."""
    lines = [
        "global",
        "    maxconn 512",
        "defaults",
        "    mode http",
        "    timeout connect 2s",
        "    timeout client 60s",
        "    timeout server 60s",
        "    timeout check 2s",
        "    retries 3",
        "    option redispatch 1",
        "    retry-on conn-failure empty-response",
        "frontend api",
        f"    bind {listen[0]}:{listen[1]}",
        f"    monitor-uri {LB_HEALTH_PATH}",
        "    default_backend replicas",
        "backend replicas",
        "    balance roundrobin",
        "    option httpchk",
        "    http-check send meth GET uri /healthz",
        "    http-check expect status 200",
        '    http-error status 503 content-type application/json string "{\\"error\\":\\"no replica\\"}" '
        "hdr Retry-After 1",
        "    default-server inter 500ms fall 2 rise 2",
    ]
    lines += [f"    server {name} {host}:{port} check" for name, (host, port) in servers.items()]
    return "\n".join(lines) + "\n"


def haproxy_process(root: Path, listen: tuple[str, int], servers: dict[str, tuple[str, int]]) -> ManagedProcess:
    """haproxy in the foreground (``-db``) with :func:`haproxy_config`; not started."""
    config = root / "haproxy.cfg"
    config.write_text(haproxy_config(listen, servers))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return ManagedProcess(
        "haproxy",
        [HAPROXY, "-f", str(config), "-db"],
        env,
        root / "logs" / "haproxy.log",
        f"http://{listen[0]}:{listen[1]}{LB_HEALTH_PATH}",
    )


def haproxy_available() -> bool:
    return os.access(HAPROXY, os.X_OK) or shutil.which("haproxy") is not None


# A fresh database ---------------------------------------------------------------------------


@contextlib.contextmanager
def fresh_database(base_url: str) -> Iterator[str]:
    """A new database on the server of ``base_url`` (dropped on exit); yields its URL."""
    from sqlalchemy import create_engine, make_url, text

    name = f"lh_many_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(base_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testing.many_hosts")
    sub = parser.add_subparsers(dest="command", required=True)
    fleet = sub.add_parser("fleet", help="the fleet controller, its GPU workers placed over hosts")
    fleet.add_argument("--config", required=True)
    fleet.add_argument("--hosts", required=True, help="JSON: host address -> its workers' environment")
    fleet.add_argument("--down-dir", required=True, help="a file named after a host marks it down")
    fleet.add_argument("--logs", required=True)
    args = parser.parse_args(argv)
    return _run_fleet(args)


if __name__ == "__main__":
    sys.exit(main())
