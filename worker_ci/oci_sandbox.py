"""The OCI backend for CI jobs: each step in a fresh container of the job's image (podman + runc).

For jobs with ``container:`` and ``services:``. What the worker guarantees, as the bubblewrap
backend does (``worker_ci.sandbox``):

- **Who the job is.** The attempt's leased uid and gid (``JobUserPool``) in every container
  (``--user``), no capabilities (``--cap-drop ALL``), ``no_new_privileges``, no user namespace:
  the uid is an unprivileged host uid, so its rlimits bind.
- **What it sees.** The image's root filesystem read-only (``--read-only``, no tmpfs of
  podman's), the job root at ``/ci`` (``MOUNT_POINT``, as in every backend, so actions and the
  attack suite see one layout; GitHub's ``/__w`` is not used), ``runner/`` and ``actions/``
  read-only, the job's ``tmp/`` at ``/tmp``, the stub ``passwd``
  and ``group``, a sized ``/dev/shm``; ``/proc`` of the container's own processes.
- **Limits.** The cgroup podman makes per container: ``--memory`` (swap equal, so none) and
  ``--pids-limit``; ``--ulimit`` for processes, file size, CPU and core files (explicitly, as
  podman's defaults exceed this host's hard limits).
- **Kernel surface.** bubblewrap's seccomp filter, as an OCI profile (``oci_podman``).
- **Network.** ``--network none``, or for a job with services its own private network
  (``worker_ci.oci_services``); a job without ``container:`` also reaches its services at
  their mapped ports on the step's loopback (``worker_ci.oci_ports``). Egress
  (``network: true``) is not given by this backend.
- **Secrets.** A step's environment goes through an env file (0600, in the worker's own state
  directory, never in the job root) or podman's own environment, never onto a command line.
- **Images.** Only from the deployment's registry mirror (``LEASEHOLD_CI_OCI_REGISTRY``), by
  the digest pinned when the push was listed, or the one the attempt resolved at its start:
  every step of an attempt runs the same image. The job-side helper (checkout, cleanup,
  hashes) always runs in the worker's helper image (``LEASEHOLD_CI_OCI_IMAGE``), as the job.

Containers are ``--rm`` and labelled with this worker's state directory: the constructor
removes any that a killed worker left.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import resource
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from activities.ci.image_pins import MirrorUnavailable
from activities.ci.jobroot import HELPER_PYTHON, owner_of_dir
from activities.ci.sandbox import JobOwner, SandboxError, SandboxLimits, SandboxRequest
from worker_ci.cgroups import CgroupLimiter, CgroupUnavailable
from worker_ci.host_view import MOUNT_POINT, runner_files
from worker_ci.images import ImageCache, RegistryDigests
from worker_ci.job_users import JobUserPool
from worker_ci.oci_cgroups import OciStepCgroup
from worker_ci.oci_podman import PODMAN_ENV, Podman, Registry, seccomp_profile
from worker_ci.oci_ports import forwarding_argv, published_ports
from worker_ci.oci_services import (
    JobNetwork,
    ServiceContainer,
    create_network,
    leftover_network,
    remove_network,
    service_address,
    service_logs,
    service_userns,
    wait_healthy,
    write_hosts,
)
from worker_ci.step_process import PopenProcess, popen_step
from workflows.ci.types.spec import ContainerSpec, JobSpec

log = logging.getLogger(__name__)

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Names podman and its libraries read from their own environment: a job's value under such a
# name cannot travel there (multi-line values only; the rest go through the env file).
PODMAN_OWN_NAMES = (
    *("CONTAINER", "STORAGE", "REGISTR", "BUILDAH", "PODMAN", "XDG_", "DBUS", "TMPDIR", "HOME", "PATH"),
    *("GO", "NOTIFY_SOCKET", "LISTEN_", "HTTP", "NO_PROXY", "SSL_", "DOCKER", "TZ", "LANG"),
)
# Open files: podman's default exceeds the worker's own hard limit, which a container cannot pass.
NOFILE = min(65536, resource.getrlimit(resource.RLIMIT_NOFILE)[1])


@dataclass
class _Job:
    """What a running job's steps share: its image and its network."""

    image: str | None = None
    network: JobNetwork | None = None
    # ``container.env``: under every step's own environment, as ``docker exec -e`` would be.
    env: dict[str, str] = field(default_factory=dict)


class _OciProcess(PopenProcess):
    def __init__(
        self, proc: subprocess.Popen[bytes], podman: Podman, name: str, env_file: Path, cgroup: OciStepCgroup | None
    ) -> None:
        super().__init__(proc)
        self._podman = podman
        self._cgroup = cgroup
        self._name = name
        self._env_file = env_file

    def host_pids(self) -> list[int]:
        out = self._podman.run("top", self._name, "hpid", check=False)
        return sorted(int(x) for x in out.split() if x.isdigit())

    def terminate_tree(self) -> None:
        # --init: the container's pid 1 passes the signal on to the step's process.
        self._podman.run("kill", "--signal", "TERM", self._name, check=False)

    def kill_tree(self) -> None:
        self._podman.run("kill", "--signal", "KILL", self._name, check=False)
        self._signal_group(signal.SIGKILL)
        if self._cgroup is not None:
            self._cgroup.group.kill_all()

    def finish(self) -> list[str]:
        # A podman killed before it removed its container (a cancelled step) leaves it behind.
        self._podman.remove_container(self._name)
        self._env_file.unlink(missing_ok=True)
        if self._cgroup is None:
            return []
        notes = self._cgroup.notes()
        self._cgroup.remove()
        self._cgroup = None
        return notes


class OciSandbox:
    """CI jobs in containers of their own image (see the module docstring)."""

    name = "oci"
    supports_network = False

    def __init__(
        self,
        users: JobUserPool,
        registry: Registry,
        helper_image: str,
        state_dir: Path,
        cgroups: CgroupLimiter | None = None,
        podman: Podman | None = None,
        cache_images: int = 20,
        storage: Path | None = None,
    ) -> None:
        self._podman = podman or Podman(storage=storage)
        self._cgroups = cgroups
        self._users = users
        self._registry = registry
        self._digests = RegistryDigests(registry.host, registry.tls_verify)
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(state_dir, 0o700)
        self._podman.cwd = state_dir
        self._jobs: dict[Path, _Job] = {}
        self._lock = threading.Lock()
        self.images = ImageCache(self._podman, state_dir / "images.json", cache_images)
        # The helper image, pinned once: every helper of this worker runs the same one.
        self._helper_image = self._pull(ContainerSpec(image=helper_image), "the helper image", log.info)
        self._state = state_dir
        self._label = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:16]
        self._profile = state_dir / "seccomp.json"
        self._profile.write_text(seccomp_profile())
        self._sweep()

    def _sweep(self) -> None:
        """Containers and networks a killed worker of this state directory left."""
        label = f"label=leasehold.ci={self._label}"
        for name in self._podman.run("ps", "--all", "--filter", label, "--format", "{{.Names}}", check=False).split():
            self._podman.remove_container(name)
        for name in self._podman.run("network", "ls", "--filter", label, "--format", "{{.Name}}", check=False).split():
            remove_network(self._podman, leftover_network(self._podman, name))

    def mount_point(self, root: Path) -> str:
        return MOUNT_POINT

    def prepare(self, root: Path) -> JobOwner:
        return self._users.lease_root(root, runner_files)

    def release(self, root: Path) -> None:
        self.end_job(root, lambda _: None)
        self._users.release_root(root)

    def adopt(self, root: Path) -> bool:
        owner = owner_of_dir(root, "work")
        return owner is not None and self._users.adopt_root(root, owner, runner_files)

    # The job: its image and services, before the first step and after the last ------------

    def begin_job(self, root: Path, job: JobSpec, say: Callable[[str], None]) -> dict[str, Any]:
        """Pull the job's images, start its services and wait until they are healthy; returns
        the ``job.container`` and ``job.services`` contexts. ``SandboxError`` when any fails."""
        state = _Job()
        with self._lock:
            self._jobs[root] = state
        if job.container is not None:
            state.image = self._pull(job.container, "the job's container", say)
            state.env = dict(job.container.env)
        if job.services:
            owner = self._users.owner_of(root)
            # On the runner (no ``container:``) the job reaches services at localhost:<mapped port>.
            published = (
                published_ports([(k, s.ports) for k, s in job.services.items()]) if job.container is None else {}
            )
            net = create_network(self._podman, f"lh-job-{uuid.uuid4().hex[:12]}", f"leasehold.ci={self._label}")
            state.network = net
            for key, spec in job.services.items():
                self._start_service(net, key, spec, owner, say)
            for service in net.services:
                service.published = published.get(service.key, {})
                for container_port, local in service.published.items():
                    say(f"[leasehold] service {service.key}: port {container_port} at localhost:{local}")
            net.hosts_file = self._state / f"{net.name}.hosts"
            write_hosts(net.hosts_file, net.services)
            for (_key, spec), service in zip(job.services.items(), net.services, strict=True):
                wait_healthy(self._podman, service, spec, say)
        network = state.network.name if state.network is not None else "none"
        return {
            "container": {"id": state.image or "", "network": network} if job.container is not None else {},
            "services": state.network.context() if state.network is not None else {},
        }

    def end_job(self, root: Path, say: Callable[[str], None]) -> None:
        """Each service's log into the job's log, then the services and the network removed."""
        with self._lock:
            state = self._jobs.pop(root, None)
        if state is None or state.network is None:
            return
        for service in state.network.services:
            say(f"[leasehold] service {service.key} ({service.reference}) log:")
            for line in service_logs(self._podman, service).splitlines():
                say(f"  {line}")
        remove_network(self._podman, state.network)
        if state.network.hosts_file is not None:
            state.network.hosts_file.unlink(missing_ok=True)

    def _in_use(self) -> set[str]:
        """Images a running job or the helper needs (never evicted)."""
        with self._lock:
            used = {job.image for job in self._jobs.values() if job.image is not None}
            for job in self._jobs.values():
                if job.network is not None:
                    used.update(s.reference for s in job.network.services)
        return used | {getattr(self, "_helper_image", "")}

    def _pull(self, spec: ContainerSpec, what: str, say: Callable[[str], None]) -> str:
        digest = spec.digest or (spec.image.rsplit("@", 1)[1] if "@" in spec.image else None)
        if digest is None:
            # Not pinned when listed (no mirror configured there): the tag's digest now, and
            # this attempt's every step runs that one.
            try:
                digest = self._digests(spec.image)
            except MirrorUnavailable as exc:
                raise SandboxError(f"the registry mirror did not answer: {exc}") from exc
            if digest is None:
                raise SandboxError(f"{what}: {spec.image} is not in this deployment's registry mirror")
        reference = self._registry.reference(spec.image, digest)
        started = time.monotonic()
        pulled = self._podman.pull(self._registry, reference)
        self.images.touch(reference, self._in_use())
        where = (
            f"pulled from the registry mirror in {time.monotonic() - started:.1f} s"
            if pulled
            else "cached on this worker"
        )
        say(f"[leasehold] {what}: {spec.image} is {digest} ({where})")
        return reference

    def affinity_digests(self) -> list[str]:
        """The digests of the job images this worker holds, most recently used first (the
        helper image, which every job uses, left out): whose image queues it polls."""
        helper = getattr(self, "_helper_image", "")
        return [ref.rsplit("@", 1)[1] for ref in self.images.held() if "@" in ref and ref != helper]

    def _start_service(
        self, net: JobNetwork, key: str, spec: ContainerSpec, owner: JobOwner, say: Callable[[str], None]
    ) -> None:
        image = self._pull(spec, f"service {key}", say)
        ports = [p.rsplit(":", 1)[-1] for p in spec.ports]
        service = ServiceContainer(key, f"{net.name}-{key}", image, image.rsplit("@", 1)[1], ports=ports)
        args = ["run", "--detach", "--name", service.name, "--label", f"leasehold.ci={self._label}", "--pull", "never"]
        args += ["--network", net.name, "--hostname", key, *self._confinement(read_only=False)]
        args += service_userns(owner.uid or 0)
        args += ["--pids-limit", "512", "--memory", str(1 << 30), "--memory-swap", str(1 << 30)]
        args += ["--ulimit", f"nofile={NOFILE}:{NOFILE}", "--ulimit", "nproc=4096:4096", "--ulimit", "core=0:0"]
        env_file = self._env_file(spec.env)
        try:
            self._podman.run(*args, "--env-file", str(env_file), image)
        finally:
            env_file.unlink(missing_ok=True)
        net.services.append(service)
        service.address = service_address(self._podman, service, net.name)
        say(f"[leasehold] service {key} started ({service.address})")

    # Steps ------------------------------------------------------------------------------

    def _confinement(self, read_only: bool = True) -> list[str]:
        """What every container gets; a service keeps its image's root writable (its data
        lives there), in a user namespace of its own (``service_userns``)."""
        return [
            "--init",
            *(["--read-only", "--read-only-tmpfs=false"] if read_only else []),
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--security-opt",
            f"seccomp={self._profile}",
            "--security-opt",
            "mask=/proc/cmdline",
        ]

    def _env_file(self, env: dict[str, str]) -> Path:
        path = self._state / f"env-{uuid.uuid4().hex}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            for key, value in env.items():
                if ENV_NAME.match(key) and "\n" not in value and "\x00" not in value:
                    f.write(f"{key}={value}\n")
        return path

    def _limit_args(self, limits: SandboxLimits | None, cgroup: OciStepCgroup | None) -> list[str]:
        args = ["--ulimit", f"nofile={NOFILE}:{NOFILE}"]
        if limits is None:
            return args
        memory = str(limits.memory_bytes)
        args += ["--pids-limit", str(limits.max_processes)]
        if cgroup is not None:
            # The step's own group holds the memory of the container and of all below it.
            args += ["--cgroup-parent", cgroup.parent]
        else:
            args += ["--memory", memory, "--memory-swap", memory]
        return [
            *args,
            *("--shm-size", str(limits.shm_bytes)),
            *("--ulimit", f"nproc={limits.max_processes}:{limits.max_processes}"),
            *("--ulimit", f"fsize={limits.max_file_bytes}:{limits.max_file_bytes}"),
            *("--ulimit", f"cpu={limits.cpu_seconds}:{limits.cpu_seconds}", "--ulimit", "core=0:0"),
        ]

    def argv(
        self, request: SandboxRequest, owner: JobOwner, name: str, env_file: Path, cgroup: OciStepCgroup | None = None
    ) -> tuple[list[str], dict[str, str]]:
        """podman's arguments for one step, and the environment podman itself gets."""
        with self._lock:
            state = self._jobs.get(request.root, _Job())
        helper = request.name.startswith("helper-")
        image = self._helper_image if helper or state.image is None else state.image
        root, runner = request.root, request.root / "runner"
        args = [*self._podman.base, "run", "--rm", "--name", name, "--label", f"leasehold.ci={self._label}"]
        args += ["--log-driver", "none", "--pull", "never", "--hostname", "ci", *self._confinement()]
        args += ["--user", f"{owner.uid}:{owner.gid}", "--workdir", request.cwd.replace("\x00", "")]
        network = state.network.name if state.network is not None and not helper else "none"
        args += ["--network", network]
        if state.network is not None and state.network.hosts_file is not None and not helper:
            args += ["--volume", f"{state.network.hosts_file}:/etc/hosts:ro"]
        args += ["--volume", f"{root}:{MOUNT_POINT}:rw,nosuid,nodev", "--volume", f"{runner}:{MOUNT_POINT}/runner:ro"]
        if not request.writable_actions:
            args += ["--volume", f"{root / 'actions'}:{MOUNT_POINT}/actions:ro"]
        args += ["--volume", f"{root / 'tmp'}:/tmp:rw,nosuid,nodev"]
        args += ["--volume", f"{runner / 'passwd'}:/etc/passwd:ro", "--volume", f"{runner / 'group'}:/etc/group:ro"]
        args += self._limit_args(request.limits, cgroup)
        podman_env = dict(PODMAN_ENV)
        for key, value in request.env.items():
            if ENV_NAME.match(key) and ("\n" in value) and "\x00" not in value:
                if key.startswith(PODMAN_OWN_NAMES):
                    raise SandboxError(f"env {key}: a value of several lines cannot be given under this name")
                podman_env[key] = value
                args += ["--env", key]
        args += ["--env-file", str(env_file)]
        if request.stdin_fd is not None:
            args.append("--interactive")
        if request.data_fd is not None:
            args.append("--preserve-fds=1")
        step = [a.replace("\x00", "") for a in request.argv]
        if not helper and state.network is not None:
            # Only a job on the runner has published ports (a container job's list is empty).
            step = forwarding_argv(HELPER_PYTHON, state.network.forwards(), step)
        return [*args, image, *step], podman_env

    def start(self, request: SandboxRequest) -> _OciProcess:
        if request.network:
            raise SandboxError("the OCI backend gives jobs no network beyond their services")
        owner = self._users.owner_of(request.root)
        name = f"lh-step-{uuid.uuid4().hex[:16]}"
        with self._lock:
            state = self._jobs.get(request.root)
        job_env = state.env if state is not None and not request.name.startswith("helper-") else {}
        env_file = self._env_file({**job_env, **request.env})
        cgroup: OciStepCgroup | None = None
        try:
            if self._cgroups is not None and request.limits is not None:
                cgroup = OciStepCgroup(self._cgroups, f"{owner.uid}", request.limits)
            argv, env = self.argv(request, owner, name, env_file, cgroup)
            pass_fds: tuple[int, ...] = ()
            if request.data_fd is not None:
                # The data descriptor must be podman's 3 (--preserve-fds passes 3 on as 3).
                fd = int(request.data_fd)
                argv = ["/bin/bash", "-c", f'exec 3>&{fd} {fd}>&-; exec "$@"', "bash", *argv]
                pass_fds = (fd,)
            proc = popen_step(argv, request.stdin_fd, cwd=self._state, env=env, pass_fds=pass_fds)
        except (OSError, SandboxError) as exc:
            env_file.unlink(missing_ok=True)
            if cgroup is not None:
                cgroup.remove()
            raise SandboxError(f"cannot start the step's container: {exc}") from exc
        return _OciProcess(proc, self._podman, name, env_file, cgroup)


def make_oci_sandbox(settings: Any, users: JobUserPool) -> OciSandbox:
    """The backend as the settings configure it; refuses to start without a registry mirror."""
    registry = getattr(settings, "ci_oci_registry", None)
    if not registry:
        raise SandboxError("the OCI backend needs a registry mirror: set LEASEHOLD_CI_OCI_REGISTRY")
    if shutil.which("iptables") is None:
        raise SandboxError("the OCI backend needs iptables (to close job networks to the host)")
    cgroups: CgroupLimiter | None = None
    try:
        cgroups = CgroupLimiter.detect()
    except CgroupUnavailable as exc:
        # podman's own --memory and --pids-limit then hold (without the out-of-memory note).
        log.warning("OCI steps get podman's limits only: %s", exc)
    return OciSandbox(
        users,
        Registry(registry, settings.ci_oci_registry_tls_verify),
        settings.ci_oci_image,
        settings.data_dir / "ci" / "oci",
        cgroups,
        cache_images=settings.ci_oci_cache_images,
        storage=settings.ci_oci_storage,
    )
