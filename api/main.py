"""``leasehold api``: serve the API with uvicorn."""

from __future__ import annotations

import uvicorn

from api.app import create_app
from leasehold.settings import Settings


def run(settings: Settings) -> None:
    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.api_host,
        port=settings.api_port,
        log_level=settings.log_level.lower(),
        access_log=False,
    )
