"""A job's private network and its ``services:`` containers (the OCI backend's).

Each job with services gets a podman network of its own, ``--internal`` (no route off it),
``isolate=true`` (no traffic to another such network) and without podman's DNS; the host's
end of its bridge is closed by an INPUT rule (iptables and ip6tables: a bridged container
otherwise reaches every host listener on 0.0.0.0 through the gateway). Services start as their
image's user under the same limits, capabilities, seccomp filter and ``no_new_privileges`` as
the job's steps, but in a user namespace (their uid 0 is an unprivileged host uid), and the
job's containers find them by their key through an ``/etc/hosts`` the worker writes. Each is
health-checked with its ``--health-*`` options before the first step; at the end of the job
its log goes into the job's log and everything is removed.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from activities.ci.sandbox import SandboxError
from worker_ci.oci_podman import PODMAN_ENV, Podman
from workflows.ci.types.spec import ContainerSpec

log = logging.getLogger(__name__)

HEALTH_DEFAULT_INTERVAL = 2.0
HEALTH_DEFAULT_TIMEOUT = 10.0
HEALTH_DEFAULT_RETRIES = 15
# Without a health command, a service must at least still be running this long after start.
SETTLE_SECONDS = 1.0
SERVICE_LOG_BYTES = 64 << 10
# Services' user namespaces: a range of 65536 host uids per job uid, far above the job uids.
SERVICE_UID_BASE = 3_000_000_000
SERVICE_UID_SLOTS = 15_000


@dataclass
class ServiceContainer:
    key: str
    name: str
    reference: str
    digest: str
    address: str = ""
    # Container ports the job reaches at ``<key>:<port>`` (``ports:``, their container side).
    ports: list[str] = field(default_factory=list)
    # For a job without ``container:``: container port -> the step's loopback port that
    # forwards to it (``worker_ci.oci_ports``).
    published: dict[str, int] = field(default_factory=dict)


@dataclass
class JobNetwork:
    """One job's network and services (see the module docstring)."""

    name: str
    bridge: str = ""
    hosts_file: Path | None = None
    services: list[ServiceContainer] = field(default_factory=list)
    rules: list[list[str]] = field(default_factory=list)

    def forwards(self) -> list[tuple[int, str, int]]:
        """What a step's forwarder carries: (loopback port, service address, container port)."""
        return [(local, s.address, int(port)) for s in self.services for port, local in s.published.items()]

    def context(self) -> dict[str, dict[str, object]]:
        """``job.services`` as on GitHub: each service's container id, network and ports (each
        container port -> the port a job on the runner reaches it at on localhost; a container
        job reaches it at the container port, by the key, so there it maps to itself)."""
        return {
            s.key: {"id": s.name, "network": self.name, "ports": {p: str(s.published.get(p, p)) for p in s.ports}}
            for s in self.services
        }


def firewall(bridge: str, add: bool) -> list[list[str]]:
    """The commands that close (``add``) or reopen the host's end of ``bridge``."""
    op = "-I" if add else "-D"
    return [[tool, op, "INPUT", "-i", bridge, "-j", "DROP"] for tool in ("iptables", "ip6tables")]


def _run_rule(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, env=PODMAN_ENV, check=False, timeout=30)
    if done.returncode != 0:
        raise SandboxError(f"cannot close the job network to the host ({argv[0]}): {done.stderr.strip()[:300]}")


def _bridge(podman: Podman, name: str) -> str:
    info = json.loads(podman.run("network", "inspect", name))
    return str(info[0]["network_interface"])


def create_network(podman: Podman, name: str, label: str) -> JobNetwork:
    """A fresh internal, isolated network whose bridge the host does not answer on."""
    net = JobNetwork(name)
    podman.run("network", "create", "--internal", "--disable-dns", "--opt", "isolate=true", "--label", label, name)
    try:
        net.bridge = _bridge(podman, name)
        for rule in firewall(net.bridge, add=True):
            _run_rule(rule)
            net.rules.append(rule)
    except (SandboxError, ValueError, KeyError, IndexError) as exc:
        remove_network(podman, net)
        raise SandboxError(f"cannot make the job's network: {exc}") from exc
    return net


def leftover_network(podman: Podman, name: str) -> JobNetwork:
    """A network a killed worker left, with the host rules it had (to be removed)."""
    net = JobNetwork(name)
    try:
        net.bridge = _bridge(podman, name)
        net.rules = firewall(net.bridge, add=True)
    except (SandboxError, ValueError, KeyError, IndexError):
        pass
    return net


def remove_network(podman: Podman, net: JobNetwork) -> None:
    for service in net.services:
        podman.remove_container(service.name)
    podman.run("network", "rm", "--force", net.name, check=False)
    for rule in net.rules:
        undo = ["-D" if word == "-I" else word for word in rule]
        subprocess.run(undo, capture_output=True, env=PODMAN_ENV, check=False, timeout=30)
    net.rules.clear()


def service_userns(job_uid: int) -> list[str]:
    """podman options mapping a service's uids 0..65535 to a host range of the job's own."""
    base = SERVICE_UID_BASE + (job_uid % SERVICE_UID_SLOTS) * 65536
    return ["--uidmap", f"0:{base}:65536", "--gidmap", f"0:{base}:65536"]


def wait_healthy(podman: Podman, service: ServiceContainer, spec: ContainerSpec, say: Callable[[str], None]) -> None:
    """Run the service's ``--health-cmd`` (inside it, as its user) until it succeeds, as
    Docker would: every interval, after the start period, up to the retries."""
    if spec.health_cmd is None:
        time.sleep(SETTLE_SECONDS)
        _still_running(podman, service)
        return
    interval = spec.health_interval_seconds or HEALTH_DEFAULT_INTERVAL
    timeout = spec.health_timeout_seconds or HEALTH_DEFAULT_TIMEOUT
    retries = spec.health_retries or HEALTH_DEFAULT_RETRIES
    if spec.health_start_period_seconds:
        time.sleep(spec.health_start_period_seconds)
    for attempt in range(1, retries + 1):
        _still_running(podman, service)
        argv = [*podman.base, "exec", service.name, "/bin/sh", "-c", spec.health_cmd]
        try:
            done = subprocess.run(
                argv, capture_output=True, env=PODMAN_ENV, timeout=timeout, check=False, cwd=podman.cwd
            )
            healthy = done.returncode == 0
        except subprocess.TimeoutExpired:
            healthy = False
        if healthy:
            say(f"[leasehold] service {service.key} is healthy")
            return
        if attempt < retries:
            time.sleep(interval)
    raise SandboxError(f"service {service.key} is not healthy after {retries} checks of its --health-cmd")


def _still_running(podman: Podman, service: ServiceContainer) -> None:
    state = podman.run("inspect", "--format", "{{.State.Status}}", service.name, check=False).strip()
    if state != "running":
        raise SandboxError(f"service {service.key} stopped before the job's first step ({state or 'gone'})")


def service_address(podman: Podman, service: ServiceContainer, network: str) -> str:
    text = podman.run("inspect", "--format", "{{json .NetworkSettings.Networks}}", service.name)
    try:
        address = json.loads(text)[network]["IPAddress"]
    except (ValueError, KeyError, TypeError) as exc:
        raise SandboxError(f"service {service.key} has no address on the job's network") from exc
    if not isinstance(address, str) or not address:
        raise SandboxError(f"service {service.key} has no address on the job's network")
    return address


def write_hosts(path: Path, services: list[ServiceContainer]) -> None:
    """The job's ``/etc/hosts``: loopback and each service by its key (root's file, outside
    the job root; shown read-only)."""
    lines = ["127.0.0.1 localhost", "::1 localhost", *(f"{s.address} {s.key}" for s in services)]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")


def service_logs(podman: Podman, service: ServiceContainer) -> str:
    """The service's output (its last ``SERVICE_LOG_BYTES``), for the job's log."""
    argv = [*podman.base, "logs", service.name]
    try:
        done = subprocess.run(argv, capture_output=True, env=PODMAN_ENV, timeout=30, check=False, cwd=podman.cwd)
    except subprocess.TimeoutExpired:
        return "(its log could not be read in time)"
    data = (done.stdout + done.stderr)[-SERVICE_LOG_BYTES:]
    return data.decode(errors="replace")
