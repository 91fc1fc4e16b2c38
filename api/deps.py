"""Request dependencies: settings, Temporal client, database, object store, caller."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import Depends, Header, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import sessionmaker
from temporalio.client import Client

from api.auth_throttle import FailedAuthThrottle, client_key
from api.errors import ApiError
from api.principal_cache import PrincipalCache
from api.video.capacity import CapacityTracker
from leasehold.records.api_keys import Principal, lookup
from leasehold.records.ci.secrets import Keyring
from leasehold.settings import Settings
from leasehold.storage import ObjectStore


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_client(request: Request) -> Client:
    return request.app.state.temporal


async def get_db(request: Request) -> sessionmaker:
    return request.app.state.db


async def get_store(request: Request) -> ObjectStore:
    return request.app.state.store


# Declares bearer auth in the OpenAPI document for every route that depends on the caller;
# a missing or non-bearer header is ours to answer (401 in the error shape), hence no auto_error.
bearer = HTTPBearer(auto_error=False, scheme_name="ApiKey", description="An API key: `Authorization: Bearer lh_...`")


def _throttle(request: Request) -> FailedAuthThrottle:
    return request.app.state.auth_throttle


def _client(request: Request) -> str:
    return client_key(request.client.host if request.client else None)


def refuse_if_throttled(request: Request) -> None:
    """429 with ``Retry-After`` when the caller's address failed authentication too often;
    called before any credential is looked at."""
    wait = _throttle(request).retry_after(_client(request))
    if wait is not None:
        raise ApiError(
            429,
            "too_many_failed_attempts",
            "too many failed authentication attempts from this address; retry later",
            headers={"Retry-After": str(wait)},
        )


def note_failed_auth(request: Request) -> None:
    """Count a wrong credential (key, token or signature) against the caller's address."""
    _throttle(request).record_failure(_client(request))


async def get_principal(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]
) -> Principal:
    """The caller of an ``Authorization: Bearer <key>`` request; 401 otherwise, 429 after
    too many wrong keys from one address. A valid key is trusted for a moment
    (``api_principal_cache_seconds``) without asking the database again."""
    refuse_if_throttled(request)
    key = credentials.credentials.strip() if credentials is not None else ""
    if not key:
        # Not a guess: nothing to count.
        raise ApiError(
            401,
            "unauthorized",
            "missing API key: send 'Authorization: Bearer <key>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    cache: PrincipalCache = request.app.state.principals
    principal = cache.get(key)
    if principal is not None:
        return principal
    principal = await asyncio.to_thread(lookup, request.app.state.db, key)
    if principal is not None:
        cache.put(key, principal)
    if principal is None:
        note_failed_auth(request)
        raise ApiError(401, "invalid_api_key", "invalid or revoked API key", headers={"WWW-Authenticate": "Bearer"})
    return principal


SettingsDep = Annotated[Settings, Depends(get_settings)]
ClientDep = Annotated[Client, Depends(get_client)]
DbDep = Annotated[sessionmaker, Depends(get_db)]
StoreDep = Annotated[ObjectStore, Depends(get_store)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]


async def get_keyring(request: Request) -> Keyring:
    """The process's CI secrets keyring (loaded in the app's lifespan, ``api.ci.startup``); the
    secrets routers, the repositories' webhook secrets and the job-secrets broker share it."""
    return request.app.state.secrets_keyring


KeyringDep = Annotated[Keyring, Depends(get_keyring)]


async def get_capacity(request: Request) -> CapacityTracker:
    """The process's video capacity tracker (created in the app's lifespan)."""
    return request.app.state.video_capacity


CapacityDep = Annotated[CapacityTracker, Depends(get_capacity)]

# The ``Idempotency-Key`` header of the routes that create (videos, predictions, dispatches).
IdempotencyKeyHeader = Annotated[str | None, Header(alias="Idempotency-Key")]
