"""Request dependencies: settings, Temporal client, database, object store, caller."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import sessionmaker
from temporalio.client import Client

from api.errors import ApiError
from leasehold.api_keys import Principal, lookup
from leasehold.settings import Settings
from leasehold.storage import ObjectStore


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_client(request: Request) -> Client:
    return request.app.state.temporal


def get_db(request: Request) -> sessionmaker:
    return request.app.state.db


def get_store(request: Request) -> ObjectStore:
    return request.app.state.store


def get_principal(request: Request) -> Principal:
    """The caller of an ``Authorization: Bearer <key>`` request; 401 otherwise."""
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise ApiError(
            401,
            "unauthorized",
            "missing API key: send 'Authorization: Bearer <key>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    principal = lookup(request.app.state.db, key.strip())
    if principal is None:
        raise ApiError(401, "invalid_api_key", "invalid or revoked API key", headers={"WWW-Authenticate": "Bearer"})
    return principal


SettingsDep = Annotated[Settings, Depends(get_settings)]
ClientDep = Annotated[Client, Depends(get_client)]
DbDep = Annotated[sessionmaker, Depends(get_db)]
StoreDep = Annotated[ObjectStore, Depends(get_store)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
