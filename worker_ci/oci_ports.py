"""Services' mapped ports (``ports: ["5432:5432"]``) for jobs that run on the runner, as on GitHub.

A job without ``container:`` runs its steps on GitHub's runner machine and reaches each service at
``localhost:<host port>``; that is how GitHub's own service-container examples connect (a Postgres
at ``localhost:5432``). Here such a job's steps run in the worker's helper image on the job's
private network, so each step runs under the sandboxes' forwarder
(``activities.ci.runtime_forwarder``) in its own container: it listens on the step's loopback at
each mapped port, passes connections on to the service's address and container port, runs the
step as its child and exits with its status. It runs as the job's uid inside the step's
container (nothing of it runs on the host, and it reaches only what the step itself could
reach), and it ends with the step.

A port without a host side (``"6379"``) is mapped to the same number where that is free, else to
the next free port from ``EPHEMERAL_FIRST``; ``job.services.<key>.ports['<container port>']``
says which, as GitHub's does (workflows read it for randomly mapped ports).
"""

from __future__ import annotations

from activities.ci.artifact_runtime import FORWARDER as FORWARDER_FILE
from activities.ci.sandbox import SandboxError

EPHEMERAL_FIRST = 49152

# The sandboxes' one forwarder (it also carries the artifact runtime in bubblewrap), given to
# the step's Python as text: nothing of the worker is mounted into the step for it.
FORWARDER = FORWARDER_FILE.read_text()


def published_ports(services: list[tuple[str, list[str]]]) -> dict[str, dict[str, int]]:
    """Each service's container port -> the local port its job reaches it at (``ports:`` as
    written, ``"8080:80"`` or ``"80"``). ``SandboxError`` when two services ask for one port."""
    taken: dict[int, str] = {}
    found: dict[str, dict[str, int]] = {key: {} for key, _ in services}
    # Explicit host sides first: they are what the workflow connects to.
    for key, ports in services:
        for text in ports:
            host, sep, container = text.rpartition(":")
            if not sep:
                continue
            local = int(host)
            if local in taken:
                raise SandboxError(f"services.{key}.ports: {local} is already mapped for service {taken[local]}")
            taken[local] = key
            found[key][container] = local
    for key, ports in services:
        for text in ports:
            if ":" in text or text in found[key]:
                continue
            local = int(text)
            if local in taken:
                local = next(p for p in range(EPHEMERAL_FIRST, 65536) if p not in taken)
            taken[local] = key
            found[key][text] = local
    return found


def forwarding_argv(python: str, forwards: list[tuple[int, str, int]], argv: list[str]) -> list[str]:
    """``argv`` behind the forwarder (``forwards``: local port, service address, its port)."""
    if not forwards:
        return argv
    maps = [f"{local}={address}:{port}" for local, address, port in forwards]
    return [python, "-I", "-S", "-c", FORWARDER, *maps, "--", *argv]
