"""The product routers the app mounts (one line per resource)."""

from fastapi import APIRouter

ROUTERS: list[APIRouter] = []

# CI: repositories, webhooks, runs and their logs.
from api.routers import repos as _ci_repos  # noqa: E402

ROUTERS.append(_ci_repos.router)

# Video: the OpenAI-compatible /v1/videos.
from api.routers import videos as _videos  # noqa: E402

ROUTERS.append(_videos.router)
