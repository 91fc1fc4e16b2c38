"""``/v1/models``: the video model versions this deployment serves, in OpenAI's models shape
(``client.models.list()`` of the official SDK reads it)."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import PrincipalDep, SettingsDep
from api.errors import not_found
from api.schemas.models import ModelList, ServedModel
from leasehold.settings import Settings
from workflows.video.catalogue import CatalogueError, load_catalogue
from workflows.video.models import get_model, use_catalogue

router = APIRouter(prefix="/v1/models", tags=["models"])


def serve_catalogue(settings: Settings) -> None:
    """Load the catalogue at start-up and install it for the process; every model named in
    ``settings.models`` must be an entry (``CatalogueError`` otherwise)."""
    models = load_catalogue(settings.model_catalogue)
    missing = [name for name in settings.models if name not in models]
    if missing:
        source = settings.model_catalogue or "the embedded default"
        raise CatalogueError(
            f"LEASEHOLD_MODELS names {', '.join(missing)}, which the model catalogue ({source}) does not "
            f"define; it has: {', '.join(models)}"
        )
    use_catalogue(models)


@router.get("", response_model=ModelList)
async def list_models(settings: SettingsDep, _principal: PrincipalDep) -> ModelList:
    """Every model version served here."""
    return ModelList(data=[ServedModel.of(spec) for name in settings.models if (spec := get_model(name)) is not None])


@router.get("/{model_id}", response_model=ServedModel)
async def get_model_entry(model_id: str, settings: SettingsDep, _principal: PrincipalDep) -> ServedModel:
    """One model version served here; 404 for any other name."""
    spec = get_model(model_id) if model_id in settings.models else None
    if spec is None:
        raise not_found("model")
    return ServedModel.of(spec)
