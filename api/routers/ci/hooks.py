"""Push triggers: GitHub's webhook format and a generic, API-key authenticated form.

A push is made durable by starting ``CIPushWorkflow`` under a deterministic id (repository +
commit + ref) before answering 2xx; that workflow reads the workflow files at the commit and
starts one ``CIRunWorkflow`` per file, whose id is again deterministic (repository + commit +
file). A redelivered webhook, or the same push sent twice, therefore lands on the same push
and the same runs instead of creating new ones.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy.orm import sessionmaker
from temporalio.service import RPCError

from api.ci import webhook_events
from api.ci.pushes import record_push
from api.ci.signatures import signature_of
from api.deps import ClientDep, DbDep, PrincipalDep, SettingsDep, note_failed_auth, refuse_if_throttled
from api.errors import ApiError, is_not_found, not_found
from api.schemas.ci.runs import PushAccepted, PushOut, PushRequest, WebhookAnswer
from clients.ci.start import push_state
from leasehold.records.ci.repos import RepoRecord, WebhookCandidate, get_repo, webhook_candidates
from leasehold.records.ci.runs import get_push as get_push_record
from workflows import search_attributes as sa
from workflows.ci.ids import push_workflow_id
from workflows.ci.types.push import CIPushState, PullRequestInfo

router = APIRouter(tags=["ci"])
log = logging.getLogger(__name__)

ZERO_SHA = re.compile(r"^0+$")
SHA = re.compile(r"^[0-9a-fA-F]{40}([0-9a-fA-F]{24})?$")
GITHUB_WEBHOOK_PATH = "/v1/hooks/github"
# What GitHub sends in X-Hub-Signature-256; anything else cannot verify, so nothing is read.
SIGNATURE = re.compile(r"^sha256=[0-9a-f]{64}$")
# GitHub names the repository a delivery is for in headers (for a repository webhook, the
# target id is the repository's id), so the secret to verify with is known before the body
# is parsed. A delivery without them is matched by the payload's repository instead.
TARGET_ID_HEADER = "x-github-hook-installation-target-id"
TARGET_TYPE_HEADER = "x-github-hook-installation-target-type"


def _unauthorized(code: str, message: str) -> ApiError:
    return ApiError(401, code, message)


def _payload(request: Request, body: bytes) -> dict[str, Any]:
    """The JSON payload, whether sent as ``application/json`` or GitHub's form encoding.

    Any body that is not a JSON object is a 400: malformed, not UTF-8, or nested deeper than
    the decoder recurses (``RecursionError``, raised cleanly by the C decoder).
    """
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    try:
        if content_type == "application/x-www-form-urlencoded":
            values = parse_qs(body.decode(), strict_parsing=False).get("payload", [])
            data = json.loads(values[0]) if values else None
        else:
            data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ApiError(400, "invalid_payload", "the webhook body is not valid JSON", param="body") from None
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_payload", "the webhook body must be a JSON object", param="body")
    return data


def _verified(candidates: list[WebhookCandidate], body: bytes, signature: str) -> list[RepoRecord]:
    # Every candidate's signature is computed and compared in constant time.
    return [c.repo for c in candidates if hmac.compare_digest(signature_of(c.webhook_secret, body), signature)]


async def _verify(
    request: Request, db: sessionmaker, body: bytes, signature: str
) -> tuple[list[RepoRecord], dict[str, Any] | None]:
    """The repositories whose secret signed ``body``, and the payload if it had to be parsed
    to find them. Only the repository's name and id are read before the signature verifies."""
    target = request.headers.get(TARGET_ID_HEADER, "").strip()
    if target and request.headers.get(TARGET_TYPE_HEADER, "repository") == "repository":
        by_header = await asyncio.to_thread(webhook_candidates, db, None, target)
        verified = _verified(by_header, body, signature)
        if verified:
            return verified, None
    try:
        payload = _payload(request, body)
    except ApiError:
        # Nothing names a repository, so no secret can verify it.
        return [], None
    repository = webhook_events.obj(payload.get("repository"))
    full_name = webhook_events.text(repository.get("full_name"))
    host_id = repository.get("id") if isinstance(repository.get("id"), int | str) else None
    candidates = await asyncio.to_thread(webhook_candidates, db, full_name, host_id)
    return _verified(candidates, body, signature), payload


@router.post(GITHUB_WEBHOOK_PATH, responses={202: {}})
async def github_webhook(request: Request, db: DbDep, client: ClientDep, settings: SettingsDep) -> JSONResponse:
    """GitHub-format webhooks: ``push`` records a push; ``ping`` answers 200; others are ignored.

    The signature over the raw body is checked before anything else is read: no header, a
    malformed one, or one no registered repository's secret verifies answers 401, and an
    unknown repository answers the same 401, so the endpoint reveals nothing about what is
    registered. Only a verified body is parsed (a 400 if it is not a JSON object). Wrong
    signatures count against the sender's address (429 after too many).
    """
    refuse_if_throttled(request)
    signature = request.headers.get("x-hub-signature-256", "").strip()
    if not signature:
        raise _unauthorized("missing_signature", "X-Hub-Signature-256 is required")
    if not SIGNATURE.match(signature):
        note_failed_auth(request)
        raise _unauthorized("invalid_signature", "X-Hub-Signature-256 must be sha256=<64 hex digits>")
    # BodyLimitMiddleware (api/app.py) stops a body over api_webhook_max_body_bytes as it streams.
    body = await request.body()
    verified, payload = await _verify(request, db, body, signature)
    if not verified:
        note_failed_auth(request)
        raise _unauthorized("invalid_signature", "the signature does not match a registered repository's secret")
    if payload is None:
        payload = _payload(request, body)

    event = request.headers.get("x-github-event", "")
    delivery = request.headers.get("x-github-delivery")
    if event == "ping":
        return JSONResponse(WebhookAnswer(event="ping", status="ok").model_dump(), status_code=200)
    handler = webhook_events.HANDLERS.get(event)
    if handler is not None:

        async def record(
            repo: RepoRecord, sha: str, ref: str, pr: PullRequestInfo | None, name: str, action: str, key: str
        ) -> str:
            pid = await record_push(client, settings, db, repo, sha, ref, delivery, pr, payload, name, key, action)
            log.info("%s %s of %s at %s (delivery %s)", name, action, repo.id, ref, delivery)
            return pid

        accepted = WebhookAnswer(event=event, status="accepted", pushes=await handler(payload, verified, record))
        return JSONResponse(accepted.model_dump(mode="json"), status_code=202)
    if event != "push":
        answer = WebhookAnswer(
            event=event or "unknown",
            status="ignored",
            reason="only push, pull_request, release and merge_group events start runs",
        )
        return JSONResponse(answer.model_dump(), status_code=202)

    ref = payload.get("ref")
    after = payload.get("after")
    if not isinstance(ref, str) or not ref.startswith("refs/"):
        raise ApiError(400, "invalid_payload", "a push payload needs 'ref' (refs/...)", param="ref")
    if payload.get("deleted") is True or (isinstance(after, str) and ZERO_SHA.match(after)):
        answer = WebhookAnswer(event="push", status="ignored", reason="deletion of " + ref)
        return JSONResponse(answer.model_dump(), status_code=200)
    if not isinstance(after, str) or not SHA.match(after):
        raise ApiError(400, "invalid_payload", "a push payload needs 'after' (a commit sha)", param="after")

    pushes = []
    for repo in verified:
        pid = await record_push(client, settings, db, repo, after, ref, delivery, event=payload)
        log.info("push %s for %s %s@%s (delivery %s)", pid, repo.id, ref, after[:12], delivery)
        pushes.append(PushAccepted(id=pid, repo_id=repo.id, commit_sha=after.lower(), ref=ref))
    answer = WebhookAnswer(event="push", status="accepted", pushes=pushes)
    return JSONResponse(answer.model_dump(mode="json"), status_code=202)


@router.post("/v1/hooks/push", status_code=202)
async def generic_push(
    body: PushRequest, principal: PrincipalDep, db: DbDep, client: ClientDep, settings: SettingsDep
) -> PushAccepted:
    """The generic trigger: the caller's repository, a commit and a ref."""
    repo = await asyncio.to_thread(get_repo, db, principal.tenant_id, body.repo_id)
    if repo is None:
        raise not_found("repository")
    pid = await record_push(client, settings, db, repo, body.commit_sha, body.ref, None)
    return PushAccepted(id=pid, repo_id=repo.id, commit_sha=body.commit_sha.lower(), ref=body.ref)


@router.get("/v1/pushes/{push}")
async def get_push(push: str, principal: PrincipalDep, client: ClientDep, db: DbDep) -> PushOut:
    """A push and the runs it created so far (another tenant's push answers 404), from the
    read model; a push it does not hold (accepted before it existed) is asked of the engine."""
    record = await asyncio.to_thread(get_push_record, db, principal.tenant_id, push)
    if record is not None:
        return PushOut.from_state(CIPushState.model_validate(record.state), record.repo_id)
    try:
        description = await client.get_workflow_handle(push_workflow_id(push)).describe()
        if description.typed_search_attributes.get(sa.TENANT_ID) != principal.tenant_id:
            raise not_found("push")
        state = await push_state(client, push)
    except RPCError as exc:
        if is_not_found(exc):
            raise not_found("push") from None
        raise
    return PushOut.from_state(state, description.typed_search_attributes.get(sa.REPO_ID) or "")
