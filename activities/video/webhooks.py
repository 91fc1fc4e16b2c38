"""Delivering a video job's completion event to its owner's webhook endpoints.

The workflow knows this activity by its definition (``activities.video.definitions``).

One activity call handles one event of one job. It records one delivery per endpoint
(``record_event``: idempotent, so the delivery id, sent as ``webhook-id``, is the same on every
attempt and on a replayed trigger), then tries each delivery still pending once:

* the endpoint's URL is checked and its host resolved; every address must be one the policy
  allows (``leasehold.webhook_urls``), and the request goes to that checked address with the
  name only in ``Host`` and TLS SNI, so DNS rebinding cannot move it;
* the body is signed per Standard Webhooks (``leasehold.standard_webhooks``) with a fresh
  timestamp; no redirect is followed, and the response body is never read (only its status);
* a 2xx marks the delivery delivered; anything else is logged and, while attempts remain,
  left pending: the activity then fails and Temporal retries it with back-off
  (``VIDEO_WEBHOOK_RETRY``). An address the policy refuses fails the delivery for good.

The database reads and writes wait out a failover in place (``leasehold.db_retry``,
heartbeating), so an outage spends none of the attempts that belong to endpoints' failures.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import httpx
from sqlalchemy.orm import sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.video.definitions import DELIVER_VIDEO_EVENT, VideoWebhookDefinition
from leasehold.db_retry import DEFAULT_FAILOVER_SECONDS, in_activity
from leasehold.records.ci.secrets import Keyring, KeyringError
from leasehold.records.video.webhooks import (
    DeliveryStatus,
    DeliveryTarget,
    delivery_target,
    record_attempt,
    record_event,
)
from leasehold.settings import Settings
from leasehold.standard_webhooks import sign
from leasehold.webhook_urls import AddressPolicy, RefusedUrl, Resolver, parse_url
from workflows.queues import VIDEO_WEBHOOK_RETRY
from workflows.video.models import format_size
from workflows.video.types import VideoEventInput, VideoEventResult, VideoJobState, VideoStatus

log = logging.getLogger(__name__)

USER_AGENT = "leasehold-webhooks/1"
# What the log says when this process cannot open the endpoint's secret (the operator's to fix).
UNSIGNABLE = "not sent: the deployment could not open this endpoint's signing secret"
# Error text kept per attempt in the delivery log.
MAX_ERROR_CHARS = 300


def event_body(state: VideoJobState, event_type: str) -> str:
    """The event as sent: ``{"type", "timestamp", "data"}``, ``data`` a video object."""
    error = None
    if state.status in (VideoStatus.FAILED, VideoStatus.CANCELLED):
        cancelled = state.status is VideoStatus.CANCELLED
        error = {
            "code": state.error_code or ("cancelled" if cancelled else "generation_failed"),
            "message": state.error_message or ("the job was cancelled" if cancelled else "generation failed"),
        }
    at = state.completed_at or state.created_at
    data: dict[str, Any] = {
        "id": state.job_id,
        "object": "video",
        "model": state.request.model,
        "status": state.status.value,
        "created_at": int(state.created_at.timestamp()),
        "completed_at": int(state.completed_at.timestamp()) if state.completed_at else None,
        "expires_at": int(state.expires_at.timestamp()) if state.expires_at else None,
        "seconds": str(state.request.seconds),
        "size": format_size(state.request.width, state.request.height),
        "error": error,
    }
    return json.dumps(
        {"type": event_type, "timestamp": at.isoformat().replace("+00:00", "Z"), "data": data},
        separators=(",", ":"),
    )


class WebhookSender:
    """One HTTP attempt of one delivery, under the address policy."""

    def __init__(
        self,
        policy: AddressPolicy,
        schemes: list[str],
        timeout_seconds: float,
        resolver: Resolver | None = None,
    ) -> None:
        self._policy = policy
        self._schemes = schemes
        self._timeout = timeout_seconds
        self._resolver = resolver

    def send(self, target: DeliveryTarget) -> tuple[dict[str, Any], bool]:
        """(the attempt's log entry, whether retrying can help); the entry's ``ok`` says if it was delivered."""
        started = time.time()
        entry: dict[str, Any] = {"at": started, "status_code": None, "error": None, "ok": False}
        try:
            url = parse_url(target.url, self._schemes)
            address = self._policy.resolve(url, self._resolver)
        except RefusedUrl as exc:
            entry["error"] = f"refused: {exc}"[:MAX_ERROR_CHARS]
            return entry, False
        timestamp = int(time.time())
        headers = {
            "host": url.host_header,
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            "webhook-id": target.id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(target.secret, target.id, timestamp, target.body),
        }
        extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
        try:
            # trust_env=False: no proxy from the environment may reroute a checked connection.
            with (
                httpx.Client(follow_redirects=False, timeout=self._timeout, trust_env=False) as client,
                client.stream(
                    "POST",
                    url.pinned(address),
                    content=target.body.encode(),
                    headers=headers,
                    extensions=extensions,
                ) as response,
            ):
                # Only the status matters; the body is left unread, however large it is.
                entry["status_code"] = response.status_code
                entry["ok"] = 200 <= response.status_code < 300
        except httpx.HTTPError as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
        entry["duration_ms"] = round((time.time() - started) * 1000)
        return entry, True


def build_webhook_activities(settings: Settings, db: sessionmaker) -> VideoWebhookActivities:
    """The activity as a process hosts it: the settings' policy, the process's keyring."""
    sender = WebhookSender(
        AddressPolicy(settings.video_webhook_allow_cidrs),
        settings.video_webhook_schemes,
        settings.video_webhook_timeout_seconds,
    )
    return VideoWebhookActivities(db, Keyring.from_settings(settings), sender, settings.database_failover_seconds)


class VideoWebhookActivities(VideoWebhookDefinition):
    """Delivers video events; database, keyring and sender are injected (orchestration worker)."""

    def __init__(
        self,
        db: sessionmaker,
        keyring: Keyring,
        sender: WebhookSender,
        failover_seconds: float = DEFAULT_FAILOVER_SECONDS,
    ) -> None:
        self._db = db
        self._keyring = keyring
        self._sender = sender
        self._failover_seconds = failover_seconds

    def _target(self, delivery_id: str) -> DeliveryTarget | None:
        what = f"webhook delivery {delivery_id}"
        return in_activity(
            lambda: delivery_target(self._db, self._keyring, delivery_id), self._failover_seconds, what, log
        )

    def _record_attempt(self, delivery_id: str, entry: dict[str, Any], status: str) -> None:
        what = f"webhook delivery {delivery_id}"
        in_activity(lambda: record_attempt(self._db, delivery_id, entry, status), self._failover_seconds, what, log)

    @activity.defn(name=DELIVER_VIDEO_EVENT)
    def deliver_video_event(self, input: VideoEventInput) -> VideoEventResult:
        """See the module docstring."""
        state = input.state
        body = event_body(state, input.event_type.value)
        pending = in_activity(
            lambda: record_event(self._db, state.tenant_id, state.user_id, state.job_id, input.event_type.value, body),
            self._failover_seconds,
            f"webhook event of {state.job_id}",
            log,
        )
        last_attempt = activity.info().attempt >= VIDEO_WEBHOOK_RETRY.maximum_attempts
        result = VideoEventResult()
        retry: list[str] = []
        for delivery_id in pending:
            try:
                target = self._target(delivery_id)
            except KeyringError as exc:
                # This process's keyring is not the one the API sealed with (LEASEHOLD_SECRETS_KEYS
                # must be the same for both): say so in the log the owner reads, and stop.
                log.error("webhook %s of %s cannot be signed: %s", delivery_id, state.job_id, exc)
                entry = {"at": time.time(), "status_code": None, "ok": False, "error": UNSIGNABLE}
                self._record_attempt(delivery_id, entry, DeliveryStatus.FAILED)
                result.failed += 1
                continue
            if target is None or target.status != DeliveryStatus.PENDING:
                continue  # the endpoint was deleted, or another attempt finished it
            entry, retryable = self._sender.send(target)
            if entry["ok"]:
                status = DeliveryStatus.DELIVERED
                result.delivered += 1
            elif retryable and not last_attempt:
                status = DeliveryStatus.PENDING
                retry.append(delivery_id)
            else:
                status = DeliveryStatus.FAILED
                result.failed += 1
            self._record_attempt(delivery_id, entry, status)
            log.info(
                "webhook %s of %s (%s): %s %s",
                delivery_id,
                state.job_id,
                input.event_type.value,
                entry["status_code"],
                entry["error"] or "",
            )
        if retry:
            raise ApplicationError(f"{len(retry)} webhook deliveries failed; retrying", type="WebhookDeliveryFailed")
        return result
