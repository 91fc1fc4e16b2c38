"""Files of npm packages the tests read (GitHub's REST description, its webhook examples),
fetched once with ``npm pack`` from the registry into a cache (``LEASEHOLD_TEST_CACHE``, else
``~/.cache/leasehold-tests``), then read from there."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

CACHE = Path(os.environ.get("LEASEHOLD_TEST_CACHE", Path.home() / ".cache" / "leasehold-tests"))


def packed_file(package: str, member: str, target: Path) -> Path:
    """``target`` (under the cache), holding ``package/<member>`` of ``npm pack <package>``."""
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["npm", "pack", package, "--silent", "--pack-destination", str(target.parent)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    archive = target.parent / done.stdout.strip().splitlines()[-1]
    with tarfile.open(archive) as tar:
        source = tar.extractfile(f"package/{member}")
        assert source is not None, member
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(source.read())
        tmp.replace(target)
    archive.unlink()
    return target
