"""``container:`` and ``services:`` end to end: pushed through the webhook, run by a CI worker on
the OCI backend (podman + runc) with images from the tests' registry mirror.

A container job runs its steps in its own image, as the job's uid, and connects to a Postgres
service by its key and port; a second tenant's job, on a network of its own, reaches neither
that service nor any listener of the host; ``--privileged`` and host mounts are refused when
the push is listed, naming the key.
"""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Iterator

import pytest

from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import job, log_text, push_workflow, wait_for, wait_run
from tests.ci_containers.conftest import Mirror
from worker_ci.images import RegistryDigests

pytestmark = pytest.mark.slow

PG = "/usr/lib/postgresql/15/bin"
HEALTH = f'--health-cmd "{PG}/pg_isready -h 127.0.0.1" --health-interval 1s --health-retries 60'

SERVICE_JOB = """
on: push
jobs:
  db:
    runs-on: linux
    container:
      image: {postgres}
      env:
        MARK: from-container-env
    services:
      postgres:
        image: {postgres}
        ports: ["5432"]
        options: {health}
    steps:
      - run: |
          set -e
          test -x {pg}/psql || {{ echo NOT-THE-JOB-IMAGE; exit 9; }}
          echo "uid=$(id -u) mark=$MARK"
          echo "network=${{{{ job.container.network }}}} service=${{{{ job.services.postgres.id }}}}"
          echo "port=${{{{ job.services.postgres.ports['5432'] }}}}"
          echo "answer=$({pg}/psql -h postgres -p 5432 -U postgres -tAc 'select 40 + 2')"
"""

# GitHub's own example for jobs on the runner: the service at localhost:<mapped port>. Each
# probe speaks Postgres: an SSLRequest, which a Postgres without TLS answers with "N".
RUNNER_JOB = """
on: push
jobs:
  db:
    runs-on: linux
    services:
      postgres:
        image: {postgres}
        ports: ["15432:5432"]
        options: {health}
      other:
        image: {postgres}
        ports: ["5432"]
        options: {health}
    steps:
      - run: |
          cat > probe.py <<'PY'
          import socket, struct, sys
          try:
              with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5) as s:
                  s.sendall(struct.pack("!ii", 8, 80877103))
                  print(f"port {{sys.argv[1]}}:", s.recv(1).decode() or "closed")
          except OSError as exc:
              print(f"port {{sys.argv[1]}}: refused {{exc.errno}}")
          PY
          python3 probe.py 15432
          python3 probe.py ${{{{ job.services.other.ports['5432'] }}}}
          python3 probe.py 5433
          echo "mapped=${{{{ job.services.postgres.ports['5432'] }}}},${{{{ job.services.other.ports['5432'] }}}}"
      - run: python3 probe.py 15432
"""

# Tenant A's job keeps its service up (and prints its address) until the test cancels it.
VICTIM = """
on: push
jobs:
  victim:
    runs-on: linux
    services:
      secretdb:
        image: {postgres}
        options: {health}
    steps:
      - run: |
          echo "ADDR=$(getent hosts secretdb | cut -d' ' -f1)"
          sleep 120
"""

# Tenant B's job: its own service answers; tenant A's service and the host's listeners do not.
PROBE = """
on: push
jobs:
  probe:
    runs-on: linux
    container: {base}
    services:
      own:
        image: {postgres}
        options: {health}
    steps:
      - run: |
          try() {{ timeout 3 bash -c "echo > /dev/tcp/$1/$2" 2>/dev/null && echo "OPEN $1:$2" || echo "closed $1:$2"; }}
          try own 5432
          try {victim} 5432
          for host in {host_addrs}; do try "$host" {host_port}; done
"""


def host_addresses() -> list[str]:
    """Every IPv4 address of this host (the bridges' included)."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout
    return sorted({m.group(1) for m in re.finditer(r"inet (\d+\.\d+\.\d+\.\d+)/", out)})


@pytest.fixture
def host_listener() -> Iterator[int]:
    """A listener on every address of the host, as a careless host service would be."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("0.0.0.0", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


def test_a_container_job_reaches_its_postgres_service_by_key(oci_stack: CIStack, oci_mirror: Mirror) -> None:
    text = SERVICE_JOB.format(postgres=oci_mirror.postgres, health=HEALTH, pg=PG)
    pushed = push_workflow(oci_stack, text)
    run = wait_run(pushed.client, pushed.run_id, timeout=240)
    log = log_text(pushed.client, pushed.run_id, "db")
    assert run["status"] == "success", (run, log)
    assert job(run, "db")["status"] == "success"
    assert "answer=42" in log
    uids = range(1_720_000, 1_720_032)
    found = re.search(r"uid=(\d+) mark=from-container-env", log)
    assert found is not None and int(found.group(1)) in uids, log
    network = re.search(r"network=(lh-job-[0-9a-f]+) service=lh-job-[0-9a-f]+-postgres", log)
    assert network is not None, log
    # Torn down with the job: its service, its network and the host rule closing its bridge.
    podman = ["podman", "--log-level", "error"]
    left = subprocess.run([*podman, "ps", "--all", "--format", "{{.Names}}"], capture_output=True, text=True)
    assert network.group(1) not in left.stdout
    nets = subprocess.run([*podman, "network", "ls", "--format", "{{.Name}}"], capture_output=True, text=True)
    assert network.group(1) not in nets.stdout.split()
    assert "port=5432" in log, log
    # Pinned: the log names the digest every step ran, and the service's own log is there.
    pinned = RegistryDigests(oci_mirror.host, tls_verify=False)(oci_mirror.postgres)
    assert f"the job's container: {oci_mirror.postgres} is {pinned}" in log, log
    assert "service postgres is healthy" in log
    assert "database system is ready to accept connections" in log


def test_a_job_on_the_runner_reaches_its_services_at_their_mapped_localhost_ports(
    oci_stack: CIStack, oci_mirror: Mirror
) -> None:
    pushed = push_workflow(oci_stack, RUNNER_JOB.format(postgres=oci_mirror.postgres, health=HEALTH))
    run = wait_run(pushed.client, pushed.run_id, timeout=240)
    log = log_text(pushed.client, pushed.run_id, "db")
    assert run["status"] == "success", (run, log)
    # 15432 as written; "5432" unmapped on the host side gets 5432 itself (free on the step's
    # loopback); an unmapped port is closed; each step has the forwarder, not only the first.
    assert "mapped=15432,5432" in log, log
    assert log.count("port 15432: N") == 2, log
    assert "port 5432: N" in log, log
    assert "port 5433: refused" in log, log
    assert "service postgres: port 5432 at localhost:15432" in log, log


def test_another_tenants_job_reaches_neither_the_service_nor_the_host(
    oci_stack: CIStack, oci_mirror: Mirror, host_listener: int
) -> None:
    victim = push_workflow(oci_stack, VICTIM.format(postgres=oci_mirror.postgres, health=HEALTH))

    def address() -> str | None:
        found = re.search(r"ADDR=(\d+\.\d+\.\d+\.\d+)", log_text(victim.client, victim.run_id, "victim"))
        return found.group(1) if found else None

    addr = wait_for("the victim's service address", address, timeout=240)
    try:
        text = PROBE.format(
            base=oci_mirror.base,
            postgres=oci_mirror.postgres,
            health=HEALTH,
            victim=addr,
            host_addrs=" ".join(host_addresses()),
            host_port=host_listener,
        )
        probe = push_workflow(oci_stack, text)
        run = wait_run(probe.client, probe.run_id, timeout=240)
        log = log_text(probe.client, probe.run_id, "probe")
        assert run["status"] == "success", (run, log)
        assert "OPEN own:5432" in log, log
        assert f"closed {addr}:5432" in log, log
        for host in host_addresses():
            assert f"closed {host}:{host_listener}" in log, log
        # The log shows the script too: only lines the probe printed count.
        assert re.findall(r"^OPEN (\S+)$", log, re.MULTILINE) == ["own:5432"], log
    finally:
        cancel = victim.client.post(f"/v1/runs/{victim.run_id}/cancel")
        assert cancel.status_code == 202, cancel.text
    run = wait_run(victim.client, victim.run_id, timeout=120)
    assert run["status"] == "cancelled"


@pytest.mark.parametrize(
    ("body", "key", "words"),
    [
        (
            "    container:\n      image: {base}\n      options: --privileged\n",
            "jobs.x.container.options",
            "--privileged",
        ),
        (
            "    container:\n      image: {base}\n      volumes: ['/:/host']\n",
            "jobs.x.container.volumes",
            "host mounts",
        ),
        (
            "    services:\n      db:\n        image: {base}\n        options: -v /etc:/etc\n",
            "jobs.x.services.db.options",
            "host mounts",
        ),
        ("    container: leasehold/absent:1\n", "jobs.x.container.image", "not in this deployment's registry mirror"),
        (
            "    container:\n      image: {base}\n      options: --network=host\n",
            "jobs.x.container.options",
            "host network",
        ),
    ],
)
def test_privileges_host_mounts_and_host_network_are_refused(
    oci_stack: CIStack, oci_mirror: Mirror, body: str, key: str, words: str
) -> None:
    text = "on: push\njobs:\n  x:\n    runs-on: linux\n" + body.format(base=oci_mirror.base)
    text += "    steps:\n      - run: echo SHOULD-NOT-RUN\n"
    pushed = push_workflow(oci_stack, text)
    run = wait_run(pushed.client, pushed.run_id)
    assert run["status"] == "failure", run
    assert key in run["error"] and words in run["error"], run["error"]
