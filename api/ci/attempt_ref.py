"""A job's attempt as the log and summary routes are asked for it: the run and job in the path,
``attempt`` in the query (default: the job's current one), who asks, and the stores to read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends
from sqlalchemy.orm import sessionmaker
from temporalio.client import Client

from api.ci.runs import AttemptQuery
from api.deps import ClientDep, DbDep, PrincipalDep, StoreDep
from leasehold.records.api_keys import Principal
from leasehold.storage import ObjectStore


@dataclass(frozen=True)
class AttemptRef:
    run: str
    job: str
    principal: Principal
    client: Client
    db: sessionmaker
    store: ObjectStore
    attempt: int | None = None


async def attempt_ref(
    run: str,
    job: str,
    principal: PrincipalDep,
    client: ClientDep,
    db: DbDep,
    store: StoreDep,
    attempt: AttemptQuery = None,
) -> AttemptRef:
    return AttemptRef(run, job, principal, client, db, store, attempt)


AttemptRefDep = Annotated[AttemptRef, Depends(attempt_ref)]


def astuple_ref(ref: AttemptRef) -> tuple[str, str, Principal, Client, sessionmaker, ObjectStore, int | None]:
    """(run, job, principal, client, db, store, attempt), for a route that reads them as names."""
    return ref.run, ref.job, ref.principal, ref.client, ref.db, ref.store, ref.attempt
