"""Tasks the app's lifespan starts and keeps in ``app.state``: stopping one is the same for all."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from fastapi import FastAPI


async def stop_state_task(app: FastAPI, name: str) -> None:
    """Cancel the task ``app.state.<name>`` holds and wait for it (a no-op when none does)."""
    task: asyncio.Task[Any] | None = getattr(app.state, name, None)
    if task is None:
        return
    setattr(app.state, name, None)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
