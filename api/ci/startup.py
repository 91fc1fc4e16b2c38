"""What the CI side of the API sets up when the app starts (called from ``api.app``'s lifespan,
after it has set ``app.state.settings`` and ``app.state.db``)."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI

from api.ci.queue_explanation import QueueExplainer
from leasehold.clone_urls import ClonePolicy
from leasehold.records.ci.repos import bind_keyring, seal_webhook_secrets
from leasehold.records.ci.secrets import Keyring


async def start_ci(app: FastAPI) -> None:
    """Make webhook secrets usable in this process: bind the secrets keyring to the database
    (``webhook_candidates`` opens sealed secrets with it) and seal the secrets older databases
    kept in plain text; build the clone policy once."""
    settings, db = app.state.settings, app.state.db
    keyring = await asyncio.to_thread(Keyring.from_settings, settings)
    # One keyring per process, shared with /v1/secrets and the secrets broker.
    app.state.secrets_keyring = keyring
    bind_keyring(db, keyring)
    await asyncio.to_thread(seal_webhook_secrets, db, keyring)
    # Built once: a bad allow-list setting stops the API here, not at the first registration.
    app.state.clone_policy = ClonePolicy.from_settings(settings)
    # "Why is my job queued": one per process, so its brief cache is shared by every request.
    app.state.ci_queue_explainer = QueueExplainer(app.state.temporal, settings)
