"""Schemas of ``POST /v1/repos/{repo}/dispatches``: run a workflow by hand (``workflow_dispatch``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from workflows.ci.types.push import CIPushState


class DispatchIn(BaseModel):
    """Which workflow file, at which branch or tag, with which inputs (GitHub's REST body)."""

    workflow: str = Field(
        description="the file's path ('.github/workflows/deploy.yml') or name ('deploy.yml')", max_length=255
    )
    ref: str = Field(description="a branch or tag: 'main', 'refs/heads/main', 'refs/tags/v1'", max_length=255)
    # Checked by ``actions_language.inputs`` (names, kinds, sizes here; the file's
    # on.workflow_dispatch.inputs when the dispatch is listed).
    inputs: dict[str, Any] = Field(default_factory=dict, description="input name -> string, boolean or number")


class DispatchRun(BaseModel):
    id: str
    workflow_path: str


class DispatchOut(BaseModel):
    """The dispatch: its push, and its run once the ref and file are resolved (``status`` done)."""

    object: Literal["dispatch"] = "dispatch"
    push_id: str
    # "listing" (still resolving: poll GET /v1/pushes/{push_id}) or "done".
    status: str
    runs: list[DispatchRun] = Field(default_factory=list)

    @classmethod
    def from_state(cls, state: CIPushState) -> DispatchOut:
        return cls(
            push_id=state.push_id,
            status=state.status.value,
            runs=[DispatchRun(id=r.run_id, workflow_path=r.workflow_path) for r in state.runs],
        )
