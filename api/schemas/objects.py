"""Shapes every resource's schemas share: the ``list`` envelope, and views read from records."""

from __future__ import annotations

from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

ItemT = TypeVar("ItemT", bound=BaseModel)


class ObjectList(BaseModel, Generic[ItemT]):
    """``{"object": "list", "data": [...]}``; a resource's list subclasses it with its item type
    (the subclass's name, not the generic one, is what the OpenAPI schema shows)."""

    object: Literal["list"] = "list"
    data: list[ItemT]


class RecordView(BaseModel):
    """A response read field by field from a record of the same names (``model_validate(record)``)."""

    model_config = ConfigDict(from_attributes=True)
