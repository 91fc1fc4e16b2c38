"""``/v1/runs/{run}/artifacts``: what a run's jobs uploaded with ``actions/upload-artifact``
(``activities.ci.artifact_service``), and each one's zip. Another tenant's run answers 404 like
a missing one; an expired artifact is gone."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from api.ci.runs import load_run
from api.deps import ClientDep, DbDep, PrincipalDep, StoreDep
from api.errors import not_found
from api.schemas.ci.artifacts import ArtifactList, ArtifactOut
from leasehold.records.ci.artifacts import Artifact, run_artifacts
from leasehold.storage import ObjectNotFound

router = APIRouter(tags=["ci"])


def _out(artifact: Artifact) -> ArtifactOut:
    url = f"/v1/runs/{artifact.run_id}/artifacts/{artifact.id}/zip"
    return ArtifactOut.model_validate(artifact).model_copy(update={"download_url": url})


@router.get("/v1/runs/{run}/artifacts")
async def list_artifacts(run: str, principal: PrincipalDep, client: ClientDep, db: DbDep) -> ArtifactList:
    """The run's artifacts, oldest first."""
    await load_run(db, client, principal, run)
    found = await asyncio.to_thread(run_artifacts, db, run)
    return ArtifactList(data=[_out(a) for a in found])


@router.get("/v1/runs/{run}/artifacts/{artifact_id}/zip", response_class=StreamingResponse)
async def download_artifact(
    run: str, artifact_id: int, principal: PrincipalDep, client: ClientDep, db: DbDep, store: StoreDep
) -> StreamingResponse:
    """The artifact's zip, as the job uploaded it."""
    await load_run(db, client, principal, run)
    found = await asyncio.to_thread(run_artifacts, db, run, None, artifact_id)
    if not found:
        raise not_found("artifact")
    artifact = found[0]
    try:
        size = await asyncio.to_thread(store.size, artifact.object_key)
    except ObjectNotFound:
        raise not_found("artifact") from None

    def chunks() -> Iterator[bytes]:
        yield from store.open_stream(artifact.object_key)

    filename = artifact.name.replace('"', "") + ".zip"
    return StreamingResponse(
        chunks(),
        media_type="application/zip",
        headers={"Content-Length": str(size), "Content-Disposition": f'attachment; filename="{filename}"'},
    )
