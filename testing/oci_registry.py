"""The tests' registry mirror: Debian's ``docker-registry`` on loopback, filled with ``skopeo
copy`` from the images built here (``testing.oci_images``). Its storage lives beside the
image cache, so a later run of the suite finds the images already pushed."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from leasehold.devserver import free_port
from testing.harness import ManagedProcess
from testing.oci_images import ImageRecipe, cache_dir, podman_image

CONFIG = """version: 0.1
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
"""


@contextmanager
def running_registry(logs: Path) -> Iterator[str]:
    """A registry on 127.0.0.1 (``host:port``), stopped on exit."""
    root = cache_dir() / "registry"
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = logs / "registry.yml"
    config.write_text(CONFIG.format(root=root, port=port))
    proc = ManagedProcess(
        "docker-registry",
        ["/usr/bin/docker-registry", "serve", str(config)],
        {"PATH": "/usr/bin:/bin"},
        logs / "registry.log",
    ).start()
    host = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://{host}/v2/", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or not proc.alive():
                raise RuntimeError(f"docker-registry did not start (see {logs / 'registry.log'})")
            time.sleep(0.2)
        yield host
    finally:
        proc.stop()


def mirror_path(recipe: ImageRecipe) -> str:
    """Where the recipe's image is in the mirror (what a workflow names)."""
    return f"leasehold/{recipe.name}:{recipe.key}"


def push(host: str, recipe: ImageRecipe) -> str:
    """The recipe's image in the registry (copied once); its path there."""
    return copy_once(host, mirror_path(recipe), lambda: podman_image(recipe))


def copy_once(host: str, path: str, local_tag: Callable[[], str]) -> str:
    """``path`` in the registry: if it is not there yet, the image ``local_tag()`` makes in
    podman's local storage copied to it; returns ``path``."""
    present = subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", "--raw", f"docker://{host}/{path}"],
        capture_output=True,
        check=False,
    )
    if present.returncode != 0:
        tag = local_tag()
        subprocess.run(
            [
                "skopeo",
                "copy",
                "--quiet",
                "--dest-tls-verify=false",
                f"containers-storage:{tag}",
                f"docker://{host}/{path}",
            ],
            check=True,
            capture_output=True,
        )
    return path
