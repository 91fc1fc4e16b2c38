"""Where a video job's checkpoints live in the object store, and how one becomes valid.

Layout, under the job's ``object_prefix``::

    attempt-<n>/checkpoints/step-000120.state   the serialized generation state (uncommitted)
    attempt-<n>/checkpoints/step-000120.json    its manifest: the commit record

A checkpoint exists only once its manifest does. The state object is uploaded first and the
manifest (with the state's SHA-256) second, so a crash mid-upload leaves a state object
without a manifest, which nobody reads, and the previous checkpoint stays the newest valid
one. A new attempt finds its starting point by listing manifests, not from heartbeat
details: heartbeats are throttled, so the last one the server kept may name an older
checkpoint than the newest one that was committed.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel, ValidationError

from leasehold.storage import ObjectNotFound, ObjectStore

log = logging.getLogger(__name__)

# A job keeps this many committed checkpoints; older ones are deleted after each commit.
CHECKPOINTS_KEPT = 2

_MANIFEST_RE = re.compile(r"/attempt-(\d+)/checkpoints/step-(\d+)\.json$")

T = TypeVar("T")


class CheckpointManifest(BaseModel):
    """The commit record of one checkpoint."""

    step: int
    total_steps: int
    attempt: int
    state_key: str
    sha256: str
    size: int
    # Identifies the job inputs and model revision the state belongs to.
    fingerprint: str
    created_at: float


@dataclass(frozen=True)
class Restored(Generic[T]):
    """A checkpoint that was found, verified and deserialized."""

    manifest_key: str
    manifest: CheckpointManifest
    state: T


def attempt_prefix(object_prefix: str, attempt: int) -> str:
    """Every object an attempt writes lives under this prefix."""
    return f"{object_prefix}/attempt-{attempt}"


class JobCheckpoints:
    """The checkpoints of one job, seen from one attempt (which writes only under its own prefix)."""

    def __init__(self, store: ObjectStore, object_prefix: str, attempt: int) -> None:
        self._store = store
        self._object_prefix = object_prefix.rstrip("/")
        self._attempt = attempt

    def _base(self, step: int) -> str:
        return f"{attempt_prefix(self._object_prefix, self._attempt)}/checkpoints/step-{step:06d}"

    def _manifests(self) -> list[tuple[int, int, str]]:
        """(step, attempt, key) of every manifest of the job, newest first."""
        found: list[tuple[int, int, str]] = []
        for key in self._store.list(f"{self._object_prefix}/attempt-"):
            match = _MANIFEST_RE.search(key)
            if match:
                found.append((int(match.group(2)), int(match.group(1)), key))
        found.sort(reverse=True)
        return found

    def commit(self, step: int, total_steps: int, fingerprint: str, data: bytes) -> str:
        """Upload a checkpoint, then its manifest; returns the manifest key."""
        base = self._base(step)
        state_key = f"{base}.state"
        self._store.put(state_key, data, "application/octet-stream")
        manifest = CheckpointManifest(
            step=step,
            total_steps=total_steps,
            attempt=self._attempt,
            state_key=state_key,
            sha256=hashlib.sha256(data).hexdigest(),
            size=len(data),
            fingerprint=fingerprint,
            created_at=time.time(),
        )
        manifest_key = f"{base}.json"
        self._store.put(manifest_key, manifest.model_dump_json().encode(), "application/json")
        return manifest_key

    def newest_valid(self, fingerprint: str, load: Callable[[bytes], T]) -> Restored[T] | None:
        """The newest committed checkpoint whose bytes verify and deserialize, or ``None``."""
        for step, attempt, key in self._manifests():
            try:
                manifest = CheckpointManifest.model_validate_json(self._store.get(key))
                if manifest.fingerprint != fingerprint:
                    log.warning("checkpoint %s belongs to other inputs; skipped", key)
                    continue
                data = self._store.get(manifest.state_key)
            except (ObjectNotFound, ValidationError, ValueError):
                log.warning("checkpoint %s (step %d, attempt %d) is unreadable; skipped", key, step, attempt)
                continue
            if len(data) != manifest.size or hashlib.sha256(data).hexdigest() != manifest.sha256:
                log.warning("checkpoint %s does not match its manifest; skipped", key)
                continue
            try:
                state = load(data)
            except ValueError:
                log.warning("checkpoint %s does not deserialize; skipped", key, exc_info=True)
                continue
            return Restored(manifest_key=key, manifest=manifest, state=state)
        return None

    def prune(self, keep: int = CHECKPOINTS_KEPT) -> int:
        """Delete all but the ``keep`` newest checkpoints; returns how many were deleted.

        Never touches checkpoints of a later attempt: a stale attempt that comes back must not
        remove what the attempt that replaced it resumes from.
        """
        deleted = 0
        for _step, attempt, key in self._manifests()[keep:]:
            if attempt > self._attempt:
                continue
            # Manifest first: a manifest never points at a deleted state object.
            self._store.delete(key)
            self._store.delete(key.removesuffix(".json") + ".state")
            deleted += 1
        return deleted
