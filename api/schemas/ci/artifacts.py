"""Bodies of ``/v1/runs/{run}/artifacts``."""

from __future__ import annotations

from datetime import datetime

from api.schemas.objects import ObjectList, RecordView


class ArtifactOut(RecordView):
    id: int
    name: str
    size: int
    digest: str | None = None
    job_id: str
    attempt: int
    created_at: datetime
    expires_at: datetime
    download_url: str = ""


class ArtifactList(ObjectList[ArtifactOut]):
    pass
