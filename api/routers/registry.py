"""The product routers the app mounts (one line per resource)."""

from fastapi import APIRouter

ROUTERS: list[APIRouter] = []

# CI: repositories, webhooks, runs and their logs.
from api.routers.ci import repos as _ci_repos  # noqa: E402

ROUTERS.append(_ci_repos.router)

# Video: the OpenAI-compatible /v1/videos.
from api.routers.video import videos as _videos  # noqa: E402

ROUTERS.append(_videos.router)

# CI: push triggers, runs, job logs.
from api.routers.ci import hooks as _ci_hooks  # noqa: E402
from api.routers.ci import logs as _ci_logs  # noqa: E402
from api.routers.ci import runs as _ci_runs  # noqa: E402

ROUTERS += [_ci_hooks.router, _ci_runs.router, _ci_logs.router]

# CI: tenant and repository secrets (write-only).
from api.routers.ci import secrets as _ci_secrets  # noqa: E402

ROUTERS.append(_ci_secrets.router)

# CI: the secrets broker CI workers trade attempt tokens at (internal).
from api.routers.ci import job_secrets as _ci_job_secrets  # noqa: E402

ROUTERS.append(_ci_job_secrets.router)

# CI: protected deployment environments of a repository (approvals).
from api.routers.ci import environments as _ci_environments  # noqa: E402

ROUTERS.append(_ci_environments.router)

# Video: capacity signals (and the capacity tracker that admission and ETAs read).
from api.routers.video import capacity as _video_capacity  # noqa: E402

ROUTERS.append(_video_capacity.router)
