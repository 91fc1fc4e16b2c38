"""Container images for the OCI backend's tests, built here from a Debian root filesystem.

Nothing is downloaded from an image registry: each image is ``mmdebstrap`` (a minbase root
filesystem from the configured Debian mirror) plus a few packages, imported with
``podman import``. The root filesystem tar is cached under ``~/.cache/leasehold/test-images``
(``LEASEHOLD_TEST_IMAGE_CACHE``), keyed by a hash of its recipe, so only the first run of the
suite on a machine builds it (about a minute per image).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SUITE = "bookworm"
BUILD_SECONDS = 900


@dataclass(frozen=True)
class ImageRecipe:
    """One test image: a minbase root filesystem, ``packages``, shell ``hooks`` run in the
    chroot, then the image config (``podman import --change``)."""

    name: str
    packages: tuple[str, ...]
    hooks: tuple[str, ...] = ()
    changes: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        text = json.dumps([SUITE, self.packages, self.hooks, self.changes, 1])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def tag(self) -> str:
        return f"localhost/leasehold-test/{self.name}:{self.key}"


# What the job-side helper needs (python3) and what jobs of the tests run.
BASE = ImageRecipe("base", ("python3", "ca-certificates"), changes=('CMD ["/bin/bash"]',))

_PG = "/usr/lib/postgresql/15/bin"
# A Postgres that trusts every client of its network (a test service, never a real one).
POSTGRES = ImageRecipe(
    "postgres",
    ("postgresql-15",),
    hooks=(
        'chroot "$1" install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data',
        f'chroot "$1" su postgres -s /bin/sh -c "{_PG}/initdb -D /var/lib/postgresql/data --auth=trust -U postgres"',
        'echo "host all all 0.0.0.0/0 trust" >> "$1/var/lib/postgresql/data/pg_hba.conf"',
    ),
    changes=(
        "USER postgres",
        f'CMD ["{_PG}/postgres", "-D", "/var/lib/postgresql/data", "-c", "listen_addresses=*", '
        '"-c", "unix_socket_directories=/tmp"]',
    ),
)


def cache_dir() -> Path:
    return Path(os.environ.get("LEASEHOLD_TEST_IMAGE_CACHE", Path.home() / ".cache" / "leasehold" / "test-images"))


def rootfs_tar(recipe: ImageRecipe) -> Path:
    """The recipe's root filesystem tar, built once per machine (a lock serialises builders)."""
    out = cache_dir() / f"{recipe.name}-{recipe.key}.tar"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{recipe.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.exists():
            return out
        mmdebstrap = shutil.which("mmdebstrap")
        if mmdebstrap is None:
            raise RuntimeError("mmdebstrap is not installed: apt-get install mmdebstrap")
        # mmdebstrap picks its output format from the name: keep ``.tar`` last.
        partial = out.with_name(f"{out.stem}.partial.tar")
        argv = [
            mmdebstrap,
            "--variant=minbase",
            "--quiet",
            f"--include={','.join(recipe.packages)}",
            "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*",
            *(f"--customize-hook={hook}" for hook in recipe.hooks),
            SUITE,
            str(partial),
        ]
        subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, timeout=BUILD_SECONDS)
        partial.rename(out)
    return out


def podman_image(recipe: ImageRecipe, podman: str = "podman") -> str:
    """The recipe's image in podman's local storage (imported from the cached tar); its tag."""
    probe = subprocess.run([podman, "image", "exists", recipe.tag], check=False)
    if probe.returncode == 0:
        return recipe.tag
    tar = rootfs_tar(recipe)
    changes = [arg for change in recipe.changes for arg in ("--change", change)]
    subprocess.run([podman, "import", "--quiet", *changes, str(tar), recipe.tag], check=True, capture_output=True)
    return recipe.tag


if __name__ == "__main__":
    for recipe in (BASE, POSTGRES):
        print(recipe.name, podman_image(recipe))
