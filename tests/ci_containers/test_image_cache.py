"""The OCI worker's image cache against real podman and the tests' registry mirror: it says what
it holds, newest first, evicts the least recently used image past its bound from podman's store,
never one a running job uses, and remembers its images across a restart of the worker (but not
one that left podman's store meanwhile: what it holds is what its image queues advertise).

Its images are two tiny ones of its own (the suite's shared images stay where they are)."""

from __future__ import annotations

import io
import subprocess
import tarfile
import uuid
from pathlib import Path

from tests.ci_containers.conftest import Mirror
from worker_ci.images import ImageCache, RegistryDigests
from worker_ci.oci_podman import Podman, Registry


def present(reference: str) -> bool:
    return subprocess.run(["podman", "image", "exists", reference], check=False).returncode == 0


def tiny_image(mirror: Mirror, tmp_path: Path, name: str) -> str:
    """A one-file image of its own in the mirror; its path there."""
    tar = tmp_path / f"{name}.tar"
    with tarfile.open(tar, "w") as out:
        data = uuid.uuid4().hex.encode()
        info = tarfile.TarInfo("marker")
        info.size = len(data)
        out.addfile(info, io.BytesIO(data))
    local = f"localhost/leasehold-test/{name}:{uuid.uuid4().hex[:8]}"
    subprocess.run(["podman", "import", "--quiet", str(tar), local], check=True, capture_output=True)
    path = f"leasehold/cache-test-{name}:{local.rsplit(':', 1)[1]}"
    copy = ["skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"containers-storage:{local}"]
    subprocess.run([*copy, f"docker://{mirror.host}/{path}"], check=True, capture_output=True)
    subprocess.run(["podman", "rmi", "--force", local], check=True, capture_output=True)
    return path


def pulled(podman: Podman, mirror: Mirror, path: str) -> str:
    registry = Registry(mirror.host, tls_verify=False)
    digest = RegistryDigests(mirror.host, tls_verify=False)(path)
    assert digest is not None
    reference = registry.reference(path, digest)
    podman.pull(registry, reference)
    assert present(reference)
    return reference


def test_least_recently_used_images_are_evicted_past_the_bound(oci_mirror: Mirror, tmp_path: Path) -> None:
    podman = Podman()
    first = pulled(podman, oci_mirror, tiny_image(oci_mirror, tmp_path, "first"))
    second = pulled(podman, oci_mirror, tiny_image(oci_mirror, tmp_path, "second"))
    cache = ImageCache(podman, tmp_path / "images.json", max_images=1)
    assert cache.touch(first, set()) == []
    # The first image is in use (a running job's): nothing is evicted, the bound waits.
    assert cache.touch(second, in_use={first}) == []
    assert cache.held() == [second, first]
    # A restarted worker knows what it holds; the next use evicts the oldest unused image.
    again = ImageCache(podman, tmp_path / "images.json", max_images=1)
    assert again.held() == [second, first]
    assert again.touch(second, set()) == [first]
    assert again.held() == [second]
    assert not present(first) and present(second)
    again._remove(second)
    assert not present(second)


def test_a_restarted_worker_forgets_images_gone_from_its_store(oci_mirror: Mirror, tmp_path: Path) -> None:
    podman = Podman()
    kept = pulled(podman, oci_mirror, tiny_image(oci_mirror, tmp_path, "kept"))
    removed = pulled(podman, oci_mirror, tiny_image(oci_mirror, tmp_path, "removed"))
    cache = ImageCache(podman, tmp_path / "images.json", max_images=4)
    cache.touch(kept, set())
    cache.touch(removed, set())
    assert cache.held() == [removed, kept]
    # Removed behind the worker's back (a wiped store, an operator's podman rmi), then a restart.
    subprocess.run(["podman", "rmi", "--force", removed], check=True, capture_output=True)
    again = ImageCache(podman, tmp_path / "images.json", max_images=4)
    assert again.held() == [kept]
    assert ImageCache(podman, tmp_path / "images.json", max_images=4).held() == [kept], "saved as forgotten"
    again._remove(kept)
