"""Deterministic CI identifiers: pushes, runs, workflow ids, idempotency keys, log keys.

Ids are derived, never random, so a redelivered webhook maps onto the same push and the same
runs: one run per repository + commit + workflow file, enforced by the run's workflow id.
"""

from __future__ import annotations

import hashlib

RUN_WORKFLOW_PREFIX = "ci-run:"
PUSH_WORKFLOW_PREFIX = "ci-push:"
LOG_ROOT = "ci"
LOG_END_NAME = "end.json"
LOG_CHUNK_SUFFIX = ".log"
LOG_GAP_SUFFIX = ".gap"
STEP_SUMMARY_NAME = "summary.md"


def _digest(*parts: str, size: int = 24) -> str:
    # NUL separators: no two different part lists hash the same text.
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:size]


def run_id(repo_id: str, commit_sha: str, workflow_path: str, event: str = "push", dispatch: str = "") -> str:
    """``run_<24 hex>`` from repo + full commit sha (lower-case) + workflow file path (+ the
    event when it is not a push: a pull request's run of a commit is not its push run; + the
    dispatch key of a ``workflow_dispatch``: each dispatch is its own run, as on GitHub)."""
    if event == "push":
        return "run_" + _digest(repo_id, commit_sha.lower(), workflow_path)
    if dispatch:
        return "run_" + _digest(repo_id, commit_sha.lower(), workflow_path, event, dispatch)
    return "run_" + _digest(repo_id, commit_sha.lower(), workflow_path, event)


def push_id(repo_id: str, commit_sha: str, ref: str, dispatch: str = "") -> str:
    """``push_<24 hex>`` from repo + commit + ref (a sha pushed to two refs is two pushes,
    whose runs still coincide because run ids ignore the ref). A ``workflow_dispatch`` is named
    by repo + its dispatch key alone: its commit is known only once its ref is resolved."""
    if dispatch:
        return "push_" + _digest(repo_id, "workflow_dispatch", dispatch)
    return "push_" + _digest(repo_id, commit_sha.lower(), ref)


def run_workflow_id(run: str) -> str:
    """Temporal workflow id of ``CIRunWorkflow`` for a run id."""
    return RUN_WORKFLOW_PREFIX + run


def push_workflow_id(push: str) -> str:
    """Temporal workflow id of ``CIPushWorkflow`` for a push id."""
    return PUSH_WORKFLOW_PREFIX + push


def run_id_from_workflow_id(workflow_id: str) -> str | None:
    """The run id a ``CIRunWorkflow`` id names, or ``None`` for other workflows."""
    if workflow_id.startswith(RUN_WORKFLOW_PREFIX):
        return workflow_id[len(RUN_WORKFLOW_PREFIX) :]
    return None


def idempotency_key(run: str, job_id: str) -> str:
    """``<run id>/<job id>``: the same on every attempt (``CI_IDEMPOTENCY_KEY``)."""
    return f"{run}/{job_id}"


def job_log_prefix(tenant_id: str, run: str, job_id: str) -> str:
    """Every attempt of a job logs under this prefix."""
    return f"{LOG_ROOT}/{tenant_id}/{run}/{job_id}/"


def attempt_log_prefix(tenant_id: str, run: str, job_id: str, attempt: int) -> str:
    """``ci/<tenant>/<run id>/<job id>/attempt-<n>/`` (ends with a slash)."""
    return f"{job_log_prefix(tenant_id, run, job_id)}attempt-{attempt}/"


def log_chunk_key(prefix: str, seq: int) -> str:
    """``<attempt prefix><seq:08d>.log``: raw output bytes, seq from 0 without holes."""
    return f"{prefix}{seq:08d}{LOG_CHUNK_SUFFIX}"


def log_gap_key(prefix: str, seq: int) -> str:
    """``<attempt prefix><seq:08d>.gap``: written (best effort) when chunk ``seq`` was lost."""
    return f"{prefix}{seq:08d}{LOG_GAP_SUFFIX}"


def log_end_key(prefix: str) -> str:
    """``<attempt prefix>end.json``: a ``LogEnd``; present once the attempt's log is complete."""
    return f"{prefix}{LOG_END_NAME}"


def step_summary_key(prefix: str) -> str:
    """``<attempt prefix>summary.md``: the attempt's ``$GITHUB_STEP_SUMMARY`` markdown, beside its log."""
    return f"{prefix}{STEP_SUMMARY_NAME}"


def parse_log_key(key: str) -> tuple[int, str] | None:
    """``(seq, kind)`` of a chunk or gap key (kind ``log``/``gap``), ``None`` for other keys."""
    name = key.rsplit("/", 1)[-1]
    for suffix, kind in ((LOG_CHUNK_SUFFIX, "log"), (LOG_GAP_SUFFIX, "gap")):
        if name.endswith(suffix) and name[: -len(suffix)].isdigit():
            return int(name[: -len(suffix)]), kind
    return None
