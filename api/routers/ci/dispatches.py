"""``POST /v1/repos/{repo}/dispatches``: run a workflow by hand (``workflow_dispatch``), as GitHub's
"create a workflow dispatch event" does.

The API cannot read workflow files (CI workers hold the mirrors), so a dispatch is a push whose
listing resolves the ref, reads the one file and checks the inputs against its
``on.workflow_dispatch.inputs``; the answer waits for that (bounded) and names the field a
refusal is about (422). Request shape, names and sizes are checked here first (400).

Every dispatch is a new run, as on GitHub: its run id derives from repository + commit + file +
event + a dispatch key, which is fresh per request unless the caller sends an
``Idempotency-Key`` (then the same key and body find the same run, and the same key with
another body is a 409).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from actions_language.inputs import DISPATCH_REF, WORKFLOW_FILE, DispatchInputError, check_shape
from api.deps import ClientDep, DbDep, IdempotencyKeyHeader, PrincipalDep, SettingsDep
from api.errors import ApiError, from_temporal, invalid, not_found
from api.schemas.ci.dispatches import DispatchIn, DispatchOut
from clients.ci.push_input import dispatch_input
from clients.ci.start import DispatchConflict, start_dispatch
from leasehold.records.ci.plans import get_plan
from leasehold.records.ci.repos import get_repo
from leasehold.records.ci.variables import variables_for
from workflows.ci.ids import push_workflow_id
from workflows.ci.push import CIPushWorkflow
from workflows.ci.types.push import DISPATCH_REJECTED, CIPushState

router = APIRouter(tags=["ci"])

START_TIMEOUT_SECONDS = 5.0
# How long the answer waits for the dispatch to be listed (a fetch of the repository); past
# it the caller gets 202 and polls GET /v1/pushes/{push_id}.
LISTING_WAIT_SECONDS = 30.0


def _dispatch_key(tenant_id: str, user_id: str, idempotency_key: str | None) -> str:
    if idempotency_key is None:
        return uuid.uuid4().hex
    # Scoped to the caller, as video jobs' keys are: two users' keys never meet.
    return hashlib.sha256("\0".join((tenant_id, user_id, idempotency_key)).encode()).hexdigest()[:32]


@router.post("/v1/repos/{repo_id}/dispatches", status_code=201, responses={202: {"model": DispatchOut}})
async def dispatch_workflow(
    repo_id: str,
    body: DispatchIn,
    principal: PrincipalDep,
    db: DbDep,
    client: ClientDep,
    settings: SettingsDep,
    idempotency_key: IdempotencyKeyHeader = None,
) -> JSONResponse:
    """Run ``body.workflow`` at ``body.ref`` with ``body.inputs``; 201 with its run once listed."""
    repo = await asyncio.to_thread(get_repo, db, principal.tenant_id, repo_id)
    if repo is None:
        raise not_found("repository")
    if not WORKFLOW_FILE.match(body.workflow):
        raise invalid("workflow", "must be a .yml or .yaml file name, or its path under .github/workflows")
    if not DISPATCH_REF.match(body.ref):
        raise invalid("ref", "must be a branch or tag name ('main', 'refs/heads/main', 'refs/tags/v1')")
    try:
        inputs = check_shape(body.inputs)
    except DispatchInputError as exc:
        raise invalid(exc.field, exc.message) from None
    if idempotency_key is not None and not (1 <= len(idempotency_key) <= 255 and idempotency_key.isprintable()):
        raise invalid("Idempotency-Key", "Idempotency-Key must be 1-255 printable characters")
    key = _dispatch_key(principal.tenant_id, principal.user_id, idempotency_key)
    request = json.dumps({"workflow": body.workflow, "ref": body.ref, "inputs": inputs}, sort_keys=True)
    digest = hashlib.sha256(request.encode()).hexdigest()
    plan = await asyncio.to_thread(get_plan, db, settings, repo.tenant_id)
    variables = await asyncio.to_thread(variables_for, db, repo.tenant_id, repo.id)
    inp = dispatch_input(settings, repo, body.workflow, body.ref, inputs, key, principal.user_id, plan, variables)
    try:
        pid = await asyncio.wait_for(start_dispatch(client, inp, digest), timeout=START_TIMEOUT_SECONDS)
    except DispatchConflict:
        raise ApiError(
            409, "idempotency_conflict", "this Idempotency-Key was used for another dispatch", "Idempotency-Key"
        ) from None
    except (RPCError, TimeoutError) as exc:
        raise from_temporal(exc, "could not record the dispatch; send it again", call="dispatch") from None
    handle = client.get_workflow_handle_for(CIPushWorkflow.run, push_workflow_id(pid))
    try:
        state = await asyncio.wait_for(handle.result(), timeout=LISTING_WAIT_SECONDS)
    except TimeoutError:
        listing = DispatchOut.from_state(CIPushState(push_id=pid))
        return JSONResponse(listing.model_dump(mode="json"), status_code=202)
    except WorkflowFailureError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError) and cause.type == DISPATCH_REJECTED:
            field = str(cause.details[0]) if cause.details else None
            raise ApiError(422, "invalid_dispatch", cause.message, param=field) from None
        # The repository could not be fetched (the push's git failure): a dependency, retried later.
        raise ApiError(503, "repository_unavailable", "the repository could not be read; send it again") from None
    except RPCError as exc:
        raise from_temporal(exc, "could not read the dispatch; GET /v1/pushes/" + pid, call="dispatch") from None
    return JSONResponse(DispatchOut.from_state(state).model_dump(mode="json"), status_code=201)
