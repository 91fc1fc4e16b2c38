"""Schemas of ``/v1/models``: OpenAI's model object, plus what a video request may ask for."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from api.schemas.objects import ObjectList
from workflows.video.models import VideoModelSpec


class SecondsRange(BaseModel):
    min: int
    max: int
    default: int


class StepsRange(BaseModel):
    default: int
    max: int


class ServedModel(BaseModel):
    """One model version served here, in OpenAI's shape (``id``, ``object``, ``created``,
    ``owned_by``); the other fields say which requests it accepts."""

    id: str
    object: Literal["model"] = "model"
    created: int = Field(description="When the catalogue entry was published (Unix seconds).")
    owned_by: str
    description: str
    family: str
    sizes: list[str]
    default_size: str
    seconds: SecondsRange
    fps: int
    steps: StepsRange

    @classmethod
    def of(cls, spec: VideoModelSpec) -> ServedModel:
        # Weights locations and hub ids are the deployment's business, never shown to clients.
        return cls(
            id=spec.name,
            created=spec.created,
            owned_by=spec.owned_by,
            description=spec.description,
            family=spec.family,
            sizes=list(spec.sizes),
            default_size=spec.default_size,
            seconds=SecondsRange(min=spec.min_seconds, max=spec.max_seconds, default=spec.default_seconds),
            fps=spec.fps,
            steps=StepsRange(default=spec.default_steps, max=spec.max_steps),
        )


class ModelList(ObjectList[ServedModel]):
    """Answer of ``GET /v1/models``."""
