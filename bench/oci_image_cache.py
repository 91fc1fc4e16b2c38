"""What an image-cache miss costs an OCI job: time to its first step with the image cold (not in
podman's store: pulled from the registry mirror) beside warm (cached), for two images.

    python -m bench.oci_image_cache              # 3 rounds per image
    python -m bench.oci_image_cache --rounds 5

The real backend path (``OciSandbox.begin_job``: pin, pull, services none; then the first step,
``true``, in the job's container) against a loopback ``docker-registry`` filled with the test
images (``tests.ci_containers``: built from a Debian root filesystem, cached). Cold and warm
rounds alternate, so both columns come from one run on one host. Figures, never assertions.
This is the per-miss cost that image affinity (routing a job to a worker holding its image)
would save; affinity routing itself is not built yet.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from activities.ci.jobroot import JobRoot
from activities.ci.sandbox import SandboxLimits, SandboxRequest
from bench.report import Table
from testing.oci_images import BASE, POSTGRES, ImageRecipe
from testing.oci_registry import push, running_registry
from worker_ci.cgroups import CgroupLimiter
from worker_ci.images import RegistryDigests
from worker_ci.job_users import JobUserPool
from worker_ci.oci_podman import Registry
from worker_ci.oci_sandbox import OciSandbox
from workflows.ci.types.spec import ContainerSpec, JobSpec

# A second small image (the helper, base, stays cached: every job's helpers need it).
TINY = ImageRecipe("bench-tiny", ("python3-minimal",), changes=('CMD ["/bin/sh"]',))
LIMITS = SandboxLimits(memory_bytes=512 << 20, max_processes=256, max_file_bytes=1 << 30, cpu_seconds=600)


def _evict(host: str, path: str) -> None:
    """The image out of podman's store, every name of it (the next use pulls it again)."""
    digest = RegistryDigests(host, tls_verify=False)(path)
    reference = Registry(host, tls_verify=False).reference(path, digest)
    image_id = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Id}}", reference], capture_output=True, text=True, check=False
    ).stdout.strip()
    if image_id:
        subprocess.run(["podman", "rmi", "--force", image_id], capture_output=True, check=False)


def _first_step_seconds(backend: OciSandbox, work: Path, image: str) -> float:
    root = work / uuid.uuid4().hex
    backend.prepare(root)
    try:
        started = time.perf_counter()
        job = JobSpec(id="bench", name="bench", container=ContainerSpec(image=image))
        backend.begin_job(root, job, lambda _: None)
        proc = backend.start(SandboxRequest(argv=["true"], env={}, root=root, cwd="/ci/work", limits=LIMITS))
        proc.stdout.read()
        proc.wait(120)
        elapsed = time.perf_counter() - started
        proc.finish()
        return elapsed
    finally:
        backend.end_job(root, lambda _: None)
        # Emptied as the job, by the job-side helper (the root rule), then its uid released.
        JobRoot(root, backend, LIMITS).remove()
        backend.release(root)


def measure(rounds: int) -> Table:
    table = Table(
        "OCI job: time to first step, image cold vs cached",
        ["image", "cold p50 s", "warm p50 s", "miss costs"],
    )
    with tempfile.TemporaryDirectory() as tmp, running_registry(Path(tmp)) as host:
        helper = push(host, BASE)
        images = [push(host, POSTGRES), push(host, TINY)]
        work = Path(tmp) / "ws"
        work.mkdir()
        users = JobUserPool(Path(tmp) / "uids", 1_990_000, 8)
        backend = OciSandbox(users, Registry(host, False), helper, Path(tmp) / "oci", CgroupLimiter.detect())
        for path in images:
            cold, warm = [], []
            for _ in range(rounds):
                _evict(host, path)
                cold.append(_first_step_seconds(backend, work, path))
                warm.append(_first_step_seconds(backend, work, path))
            c, w = statistics.median(cold), statistics.median(warm)
            table.rows.append([path.split("/")[-1], f"{c:.2f}", f"{w:.2f}", f"{c - w:.2f} s ({c / w:.1f}x)"])
    table.notes.append(f"{rounds} cold and {rounds} warm rounds per image, alternating; runc, cgroup v1")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.oci_image_cache", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(measure(args.rounds).text())


if __name__ == "__main__":
    main()
