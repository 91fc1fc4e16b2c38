"""The declarative base every leasehold table is declared on, the clock its timestamps use, and
what the record modules share: an input error naming its field, a row read into a dataclass.

The table modules (listed in ``leasehold.records.tables``) import this; the engine, sessions and
migrations are ``leasehold.database``'s.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.orm import DeclarativeBase

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    Info = TypeVar("Info", bound=DataclassInstance)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    """Declarative base of every leasehold table."""


class FieldError(ValueError):
    """An input the caller can fix; ``field`` names it (the API answers 422 with that field)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def from_row(info: type[Info], row: object, **values: Any) -> Info:
    """The dataclass ``info`` of ``row``: each field the row's attribute of the same name, unless
    ``values`` gives it (a field named otherwise on the row, or converted)."""
    return info(**{f.name: values[f.name] if f.name in values else getattr(row, f.name) for f in fields(info)})
