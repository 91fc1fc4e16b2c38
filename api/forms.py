"""Form bodies (urlencoded or multipart) read as plain string fields."""

from __future__ import annotations

from starlette.datastructures import FormData

from api.errors import ApiError


def string_fields(form: FormData, file_code: str, file_message: str) -> dict[str, str]:
    """Every field of ``form``; a file upload is a 400 ``file_code`` naming it (``file_message``
    is formatted with the field's ``name``)."""
    fields: dict[str, str] = {}
    for name, value in form.multi_items():
        if not isinstance(value, str):
            raise ApiError(400, file_code, file_message.format(name=name), name)
        fields[name] = value
    return fields
