"""Images of the OCI backend: the registry mirror as the listing asks it (the digest a tag points
at now: registry API v2, ``HEAD /v2/<name>/manifests/<tag>``, nothing pulled), and the worker's
image cache (podman's local store, bounded, least recently used evicted)."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
from pathlib import Path

import httpx

from activities.ci.image_pins import MirrorUnavailable
from worker_ci.oci_podman import Podman

log = logging.getLogger(__name__)

MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
ASK_SECONDS = 15.0


class RegistryDigests:
    """``ImageDigests`` of one registry mirror (HTTPS, or plain HTTP where TLS is not verified:
    a mirror on loopback)."""

    def __init__(self, host: str, tls_verify: bool = True) -> None:
        self._base = f"{'https' if tls_verify else 'http'}://{host}/v2"

    def __call__(self, image: str) -> str | None:
        path, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
        url = f"{self._base}/{path}/manifests/{tag}"
        try:
            response = httpx.head(url, headers={"Accept": MANIFEST_TYPES}, timeout=ASK_SECONDS)
        except httpx.HTTPError as exc:
            raise MirrorUnavailable(str(exc)) from exc
        if response.status_code == 404:
            return None
        digest = response.headers.get("Docker-Content-Digest", "")
        if response.status_code != 200 or not DIGEST.match(digest):
            raise MirrorUnavailable(f"HEAD {url}: {response.status_code}")
        return digest


class ImageCache:
    """The images this worker holds (podman's local store), least recently used evicted past
    ``max_images``; ``held()`` says what it holds, newest first. Uses survive a restart of the
    worker (a JSON file in its state directory, root's own)."""

    def __init__(self, podman: Podman, state_file: Path, max_images: int) -> None:
        self._podman = podman
        self._file = state_file
        self._max = max(1, max_images)
        self._lock = threading.Lock()
        self._used: dict[str, float] = {}
        with contextlib.suppress(OSError, ValueError):
            loaded = json.loads(state_file.read_text())
            if isinstance(loaded, dict):
                self._used = {str(k): float(v) for k, v in loaded.items()}
        # What it says it holds is what its image queues advertise: an image gone from the store
        # meanwhile (a store wiped, an image removed by hand) is forgotten, not advertised.
        gone = [reference for reference in self._used if not podman.exists(reference)]
        for reference in gone:
            del self._used[reference]
        if gone:
            log.info("image cache: %d image(s) no longer in the store forgotten", len(gone))
            with contextlib.suppress(OSError):
                self._save()

    def held(self) -> list[str]:
        with self._lock:
            return sorted(self._used, key=lambda r: self._used[r], reverse=True)

    def touch(self, reference: str, in_use: set[str]) -> list[str]:
        """Record a use of ``reference``, then evict the least recently used images beyond the
        bound that no running job uses; returns the evicted references."""
        evicted = []
        with self._lock:
            self._used[reference] = time.time()
            for old in sorted(self._used, key=lambda r: self._used[r]):
                if len(self._used) <= self._max:
                    break
                if old == reference or old in in_use:
                    continue
                self._remove(old)
                del self._used[old]
                evicted.append(old)
            self._save()
        for old in evicted:
            log.info("image cache: evicted %s (holding %d)", old, len(self._used))
        return evicted

    def _remove(self, reference: str) -> None:
        """Remove the image ``reference`` names, with every name it has (an image pulled by
        digest has no tag to drop), unless a container (a job's) uses it."""
        image_id = self._podman.run("image", "inspect", "--format", "{{.Id}}", reference, check=False).strip()
        if not image_id:
            return
        users = self._podman.run("ps", "--all", "--quiet", "--filter", f"ancestor={image_id}", check=False)
        if not users.strip():
            self._podman.run("rmi", "--force", "--ignore", image_id, check=False)

    def _save(self) -> None:
        partial = self._file.with_suffix(".partial")
        partial.write_text(json.dumps(self._used))
        partial.replace(self._file)
