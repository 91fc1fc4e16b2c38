"""The registry mirror as the listing asks it: the digest a tag points at now (registry API v2,
``HEAD /v2/<name>/manifests/<tag>``), without pulling anything."""

from __future__ import annotations

import re

import httpx

from activities.ci.image_pins import MirrorUnavailable

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
