"""A prediction's own webhook: ``start``, ``output``, ``logs`` and ``completed``, signed as
Replicate signs them (Standard Webhooks, with the caller's default signing secret).

The secret is the one ``GET /v1/webhooks/default/secret`` shows: derived from the deployment's
signing key and the caller, so it needs no table and is the same on every API replica. The
delivery goes through the sender the ``/v1/videos`` endpoints use
(``activities.video.webhooks.WebhookSender``): the same address policy, pinned connection, no
redirects, unread response bodies.

The API process that accepted the prediction follows it (``jobs.watch``, the read model the
SSE stream reads) and sends each event as the job reaches it; ``completed`` is retried a few
times with back-off. It is not durable: if that process stops before the job ends, the
remaining events are not sent (``/v1/webhooks`` endpoints, which the workflow delivers to,
are the durable way to hear of completions).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from activities.video.webhooks import WebhookSender
from api.replicate.predictions import TERMINAL
from api.video.jobs import VideoJobs
from leasehold.records.api_keys import Principal
from leasehold.records.video.webhooks import DeliveryTarget
from leasehold.settings import Settings
from leasehold.standard_webhooks import SECRET_PREFIX
from leasehold.webhook_urls import AddressPolicy, RefusedUrl, parse_url

log = logging.getLogger(__name__)

EVENTS = ("start", "output", "logs", "completed")
# Replicate sends logs and output at most this often.
THROTTLE_SECONDS = 0.5
# A followed prediction is given up after this long (a job's own budget is shorter).
FOLLOW_MAX_SECONDS = 6 * 3600.0
# Attempts of the ``completed`` event, and the first pause between them (doubling).
COMPLETED_ATTEMPTS = 4
RETRY_PAUSE_SECONDS = 1.0


def signing_secret(settings: Settings, principal: Principal) -> str:
    """The caller's ``whsec_`` secret (stable: derived, never stored)."""
    message = b"\x00".join([b"replicate-webhook-secret/1", principal.tenant_id.encode(), principal.user_id.encode()])
    digest = hmac.new(settings.signing_key(), message, hashlib.sha256).digest()
    return SECRET_PREFIX + base64.b64encode(digest).decode()


@dataclass(frozen=True)
class Subscription:
    """Where a prediction's events go, and which of them."""

    url: str
    events: frozenset[str]
    secret: str


def check_url(url: str, settings: Settings) -> str | None:
    """Why the deployment's policy refuses ``url`` (the check at every delivery repeats it), or ``None``."""
    try:
        AddressPolicy(settings.video_webhook_allow_cidrs).check_literal(parse_url(url, settings.video_webhook_schemes))
    except RefusedUrl as exc:
        return str(exc)
    return None


class PredictionWebhooks:
    """The webhooks this API process follows (one instance per process, on ``app.state``)."""

    def __init__(self, settings: Settings) -> None:
        self.sender = WebhookSender(
            AddressPolicy(settings.video_webhook_allow_cidrs),
            list(settings.video_webhook_schemes),
            settings.video_webhook_timeout_seconds,
        )
        self.following: dict[str, asyncio.Task[None]] = {}

    def follow(
        self,
        jobs: VideoJobs,
        created: Any,
        subscription: Subscription,
        render: Callable[[Any], dict[str, Any]],
    ) -> None:
        """Send the events of the job ``created`` (its view as the create answered it) to
        ``subscription`` from now until it ends (once per job)."""
        job_id = created.job_id
        if job_id in self.following:
            return  # an idempotent replay of the create: the first one follows it
        task = asyncio.create_task(self._follow(jobs, created, subscription, render), name=f"webhook-{job_id}")
        self.following[job_id] = task
        task.add_done_callback(lambda _: self.following.pop(job_id, None))

    async def _follow(
        self, jobs: VideoJobs, created: Any, subscription: Subscription, render: Callable[[Any], dict[str, Any]]
    ) -> None:
        job_id = created.job_id
        sequence = 0
        sent_logs: str | None = None
        sent_output: Any = None
        last_sent = 0.0
        loop = asyncio.get_running_loop()

        async def send(event: str, body: dict[str, Any], attempts: int = 1) -> None:
            nonlocal sequence, last_sent
            sequence += 1
            target = DeliveryTarget(
                id=f"msg_{job_id}_{sequence}",
                url=subscription.url,
                secret=subscription.secret,
                body=_json(body),
                status="pending",
            )
            pause = RETRY_PAUSE_SECONDS
            for attempt in range(1, attempts + 1):
                entry, retryable = await asyncio.to_thread(self.sender.send, target)
                if entry["ok"] or not retryable:
                    break
                log.info("webhook %s of %s: attempt %d failed (%s)", event, job_id, attempt, entry)
                if attempt < attempts:
                    await asyncio.sleep(pause)
                    pause *= 2
            last_sent = loop.time()

        try:
            # ``start`` is the prediction as created (``starting``, as Replicate sends it), however
            # far the job has gone by the time this task first runs.
            first = render(created)
            sent_logs = first["logs"]
            if "start" in subscription.events:
                await send("start", first)
            async for view in jobs.watch(job_id, None, FOLLOW_MAX_SECONDS):
                body = render(view)
                terminal = body["status"] in TERMINAL
                if body["output"] is not None and sent_output is None and "output" in subscription.events:
                    sent_output = body["output"]
                    await send("output", body)
                elif body["logs"] != sent_logs and not terminal and "logs" in subscription.events:
                    if loop.time() - last_sent >= THROTTLE_SECONDS:
                        sent_logs = body["logs"]
                        await send("logs", body)
                if terminal:
                    if "completed" in subscription.events:
                        await send("completed", body, COMPLETED_ATTEMPTS)
                    return
        except Exception as exc:
            # A deleted job, or an outage past the watch's reach: the remaining events are lost
            # (said in the module docstring); one line, not a traceback per prediction.
            log.warning("webhook of %s stopped: %s", job_id, type(exc).__name__)


def _json(body: dict[str, Any]) -> str:
    return json.dumps(body, separators=(",", ":"))
