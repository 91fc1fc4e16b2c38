"""Starting and stopping the process's capacity tracker from the app's lifespan."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI

from api.background import stop_state_task
from api.video.capacity import CapacityTracker


async def start_capacity(app: FastAPI) -> CapacityTracker:
    """Create the process's tracker (``app.state.video_capacity``) and start its refreshes.

    Call from the app's lifespan once ``app.state.settings`` and ``app.state.temporal`` are set;
    a second call returns the running tracker.
    """
    tracker: CapacityTracker | None = getattr(app.state, "video_capacity", None)
    if tracker is None:
        tracker = CapacityTracker(app.state.temporal, app.state.settings, app.state.db)
        app.state.video_capacity = tracker
        app.state.video_capacity_task = asyncio.create_task(tracker.run(), name="video-capacity")
    return tracker


async def stop_capacity(app: FastAPI) -> None:
    """Stop the refreshes ``start_capacity`` started (a no-op when none run)."""
    await stop_state_task(app, "video_capacity_task")
