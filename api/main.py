"""``leasehold api``: serve the API with uvicorn."""

from __future__ import annotations

import uvicorn

from api.app import create_app
from leasehold.settings import Settings
from workflows.video.catalogue import CatalogueError


def run(settings: Settings) -> None:
    try:
        app = create_app(settings)
    except CatalogueError as exc:
        # A configuration mistake: one line that names it, not a traceback.
        raise SystemExit(f"leasehold: error: {exc}") from None
    uvicorn.run(
        app,
        host=settings.api_host,
        port=settings.api_port,
        log_level=settings.log_level.lower(),
        access_log=False,
    )
